package haltline.tool_test

import data.haltline.tool

_registry := {
	"fs": {
		"read_file": {"level": "L0"},
		"write_file": {"level": "L1"},
		"delete_file": {"level": "L2"},
		"format_disk": {"level": "L2", "deny": true},
	},
	"": {"search": {"level": "L0"}},
}

test_registry_levels if {
	d := tool.decision with input as {"tool": {"server": "fs", "name": "read_file"}}
		with data.haltline.tools as _registry
	d == {"allow": true, "approval": false, "level": "L0", "reason": ""}
}

test_http_tool_level if {
	d := tool.decision with input as {"tool": {"name": "search"}}
		with data.haltline.tools as _registry
	d.level == "L0"
	d.allow
}

test_l2_needs_approval if {
	d := tool.decision with input as {"tool": {"server": "fs", "name": "delete_file"}}
		with data.haltline.tools as _registry
	d.allow
	d.approval
	d.level == "L2"
}

test_unknown_tool_gets_default if {
	d := tool.decision with input as {"tool": {"server": "fs", "name": "chmod"}}
		with data.haltline.tools as _registry
	d.allow
	not d.approval
	d.level == "L1"
}

test_unknown_tool_default_level_from_data if {
	d := tool.decision with input as {"tool": {"name": "x"}}
		with data.haltline.tool_defaults as {"level": "L2"}
	d.approval
}

test_registry_deny if {
	d := tool.decision with input as {"tool": {"server": "fs", "name": "format_disk"}}
		with data.haltline.tools as _registry
	not d.allow
	not d.approval
	d.reason == "denied by the tool registry"
}

test_denied_list if {
	d := tool.decision with input as {"tool": {"server": "fs", "name": "write_file"}}
		with data.haltline.tools as _registry
		with data.haltline.tool_defaults as {"denied": ["fs/write_file"]}
	not d.allow
}

test_deny_unknown if {
	d := tool.decision with input as {"tool": {"name": "nope"}}
		with data.haltline.tool_defaults as {"deny_unknown": true}
	not d.allow
	d.reason == "tool is not in the registry"
}

test_hints_only_when_trusted if {
	tool.decision.level == "L1" with input as {"tool": {"name": "rm", "hints": {"destructiveHint": true}}}
	tool.decision.level == "L2" with input as {"tool": {"name": "rm", "hints": {"destructiveHint": true}}}
		with data.haltline.tool_defaults as {"use_hints": true}
}
