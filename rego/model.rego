# Package haltline.model is asked before each model call (docs/design.md §11).
#
# Answers:
#   deny               set of reasons; any reason refuses the call (403)
#   max_output_tokens  optional cap on the requested output
#   allowed            the allow-list in force, when there is one
#
# Data (all optional):
#   data.haltline.models.allowed                  model names or globs ("gpt-4o*")
#   data.haltline.models.denied                   model names or globs
#   data.haltline.models.max_output_tokens        cap for every model
#   data.haltline.models.per_model[name].max_output_tokens
#
# With none of these set every rule below is undefined for any input, which
# lets the engine answer without evaluating at all.
package haltline.model

default _name := ""

_name := input.model.name

# Globs use no delimiters so "gpt-4o*" also matches "gpt-4o-mini-2024".
_matches(patterns) if {
	some p in patterns
	glob.match(p, [], _name)
}

allowed := data.haltline.models.allowed

deny contains sprintf("model %q is not in the allowed list", [_name]) if {
	allowed
	not _matches(allowed)
}

deny contains sprintf("model %q is denied", [_name]) if {
	_matches(data.haltline.models.denied)
}

# The per-model cap wins over the global one.
max_output_tokens := n if {
	n := data.haltline.models.per_model[_name].max_output_tokens
} else := n if {
	n := data.haltline.models.max_output_tokens
}
