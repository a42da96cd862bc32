# Package haltline.tool is asked before each tool call (docs/design.md §6, §11).
#
# Answer:
#   decision  {"allow": bool, "approval": bool, "level": "L0"|"L1"|"L2", "reason": string}
#
# Data (all optional):
#   data.haltline.tools[server][name]   registry entry: {"level", "deny", "approval"};
#                                       server is "" for plain HTTP tools
#   data.haltline.tool_defaults.level         level of a tool the registry does not know (L1)
#   data.haltline.tool_defaults.deny_unknown  refuse tools the registry does not know
#   data.haltline.tool_defaults.denied        list of "name" or "server/name" to refuse
#   data.haltline.tool_defaults.use_hints     trust MCP annotations of unknown tools
#                                             (readOnlyHint → L0, destructiveHint → L2)
#
# The registry is policy data, never what the model says (docs/design.md §6). The
# gateway loads the levels declared in its config into data.haltline.tools,
# where a policy directory's data.json may override them.
package haltline.tool

default _defaults := {}

_defaults := data.haltline.tool_defaults

default_level := object.get(_defaults, "level", "L1")

# Input is read by full path, never as a whole, so the engine can leave out
# the arguments when no rule reads them.
default _server := ""

_server := input.tool.server

default _name := ""

_name := input.tool.name

_qualified := concat("/", [_server, _name]) if _server != ""

_qualified := _name if _server == ""

_entry := data.haltline.tools[_server][_name]

known if _entry

_hint(h) if input.tool.hints[h] == true

level := _entry.level if {
	_entry.level
} else := input.tool.level if {
	# The caller may pass the level it resolved from its own registry.
	input.tool.level != ""
} else := "L2" if {
	object.get(_defaults, "use_hints", false) == true
	_hint("destructiveHint")
} else := "L0" if {
	object.get(_defaults, "use_hints", false) == true
	_hint("readOnlyHint")
} else := default_level

denied contains "denied by the tool registry" if _entry.deny == true

denied contains "denied by policy" if {
	some d in object.get(_defaults, "denied", [])
	d in {_name, _qualified}
}

denied contains "tool is not in the registry" if {
	not known
	object.get(_defaults, "deny_unknown", false) == true
}

default approval := false

approval if level == "L2"

approval if _entry.approval == true

# A refused call never asks a human.
default _ask := false

_ask if {
	allow
	approval
}

default allow := false

allow if count(denied) == 0

reason := concat("; ", sort(denied)) if {
	count(denied) > 0
} else := "L2 requires human approval" if {
	level == "L2"
} else := "the tool registry requires approval" if {
	approval
} else := "tool is not in the registry; default level" if {
	not known
} else := ""

decision := {
	"allow": allow,
	"approval": _ask,
	"level": level,
	"reason": reason,
}
