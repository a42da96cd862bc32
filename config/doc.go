// Package config owns the gateway's configuration: the YAML schema of
// docs/design.md §10 (the field comments are the user reference), the embedded
// defaults, the environment variables for upstreams and keys, the serve flags
// (flags override the file, the file overrides defaults) and Validate, which
// reports every problem at once.
//
// It must not hold runtime state or open anything but the config file.
package config
