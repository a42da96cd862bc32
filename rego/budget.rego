# Package haltline.budget answers `limits`: the budget vector and soft lines
# of a run, asked once when the run starts (docs/design.md §5, §11).
#
# Keys use the X-Run-Budget names. A key that is absent (or 0) means "no
# limit"; the defaults are generous so they never get in the way of a
# healthy run (docs/design.md §8): 100 steps, 30 minutes, no token or cost cap.
#
# Data (all optional), each an object of limits keys, applied in this order
# so that the more specific one wins key by key:
#   data.haltline.budgets.defaults
#   data.haltline.budgets.tenants[tenant]
#   data.haltline.budgets.teams[team]
#   data.haltline.budgets.users[user]
#   data.haltline.budgets.agents[agent_id]
#   data.haltline.budgets.task_types[task_type]
# Objects (tool_quotas) merge recursively.
package haltline.budget

# The defaults of docs/design.md §8. Soft lines are fractions of each budget.
default_limits := {
	"max_steps": 100,
	"deadline_ms": 1800000,
	"soft_compress": 0.7,
	"soft_wrapup": 0.9,
	"final_reserve": 0.1,
	"paused_time": "flow",
	"default_max_output_tokens": 4096,
	"min_output_tokens": 1024,
	# L1/L2 tools on offer: the model is asked for one tool call at a
	# time and the tool routes run such calls one after the other.
	"parallel_side_effects": false,
	# Long tool output, cut in every forwarded request: head and tail
	# inline, the full text behind a handle. "tools" turns the cut on or
	# off per tool name: {"read_file": {"cut": false}}.
	"tool_output": {"cut": true, "inline": 4096, "head": 1500, "tail": 500},
}

# Read by full path: object.get(data, …) would depend on every rule.
default _budgets := {}

_budgets := data.haltline.budgets

# Defaults keep `limits` defined when the caller sends a partial input (e.g.
# no task type). Reading input by full path, never input as a whole, lets
# the engine skip the input parts no rule reads.
default _tenant := ""

_tenant := input.principal.tenant

default _team := ""

_team := input.principal.team

default _user := ""

_user := input.principal.user

default _agent := ""

_agent := input.run.agent_id

default _task_type := ""

_task_type := input.run.task_type

_layer(kind, key) := object.get(_budgets, [kind, key], {})

limits := object.union_n([
	default_limits,
	object.get(_budgets, "defaults", {}),
	_layer("tenants", _tenant),
	_layer("teams", _team),
	_layer("users", _user),
	_layer("agents", _agent),
	_layer("task_types", _task_type),
])
