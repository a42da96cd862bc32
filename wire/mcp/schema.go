package mcp

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// SchemaError says how arguments fail a tool's input schema.
type SchemaError struct {
	Problems []string
}

func (e *SchemaError) Error() string {
	return "arguments do not match the tool's input schema: " + strings.Join(e.Problems, "; ")
}

// maxProblems bounds what one check reports: enough for a model to fix
// itself, never a wall of text.
const maxProblems = 8

// CheckArguments checks args against a JSON schema, a pragmatic subset:
// type (one or several), required, properties (recursively), items, enum
// and const. Keywords it does not know are ignored, so a schema it cannot
// fully read never refuses a call. A schema that is not JSON checks nothing.
func CheckArguments(schema, args []byte) error {
	if len(schema) == 0 {
		return nil
	}
	var s any
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return &SchemaError{Problems: []string{"arguments are not valid JSON"}}
	}
	c := checker{}
	c.check(s, v, "arguments", 0)
	if len(c.problems) == 0 {
		return nil
	}
	return &SchemaError{Problems: c.problems}
}

type checker struct{ problems []string }

func (c *checker) add(format string, a ...any) {
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, fmt.Sprintf(format, a...))
	}
}

// maxDepth bounds recursion on hostile schemas or arguments.
const maxDepth = 32

func (c *checker) check(schema, v any, path string, depth int) {
	s, ok := schema.(map[string]any)
	if !ok || depth > maxDepth || len(c.problems) >= maxProblems {
		return
	}
	if t, ok := s["type"]; ok && !typeMatches(t, v) {
		c.add("%s: want %s, got %s", path, typeText(t), typeOf(v))
		return
	}
	if e, ok := s["enum"].([]any); ok && !inEnum(e, v) {
		c.add("%s: must be one of %s", path, compact(e))
	}
	if k, ok := s["const"]; ok && !jsonEqual(k, v) {
		c.add("%s: must be %s", path, compact(k))
	}
	switch val := v.(type) {
	case map[string]any:
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok {
					if _, present := val[name]; !present {
						c.add("%s: missing required property %q", path, name)
					}
				}
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(val))
		for k := range val {
			keys = append(keys, k)
		}
		sort.Strings(keys) // stable messages
		for _, k := range keys {
			if ps, ok := props[k]; ok {
				c.check(ps, val[k], path+"."+k, depth+1)
			} else if ap, ok := s["additionalProperties"].(bool); ok && !ap {
				c.add("%s: unknown property %q", path, k)
			}
		}
	case []any:
		if items, ok := s["items"]; ok {
			for i, it := range val {
				c.check(items, it, fmt.Sprintf("%s[%d]", path, i), depth+1)
			}
		}
	}
}

func typeMatches(t, v any) bool {
	switch tt := t.(type) {
	case string:
		return oneType(tt, v)
	case []any:
		for _, x := range tt {
			if s, ok := x.(string); ok && oneType(s, v) {
				return true
			}
		}
		return false
	}
	return true // not a type we can read: no opinion
}

func oneType(t string, v any) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	}
	return true
}

func typeOf(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}

func typeText(t any) string {
	if s, ok := t.(string); ok {
		return s
	}
	return compact(t)
}

func inEnum(e []any, v any) bool {
	for _, x := range e {
		if jsonEqual(x, v) {
			return true
		}
	}
	return false
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
