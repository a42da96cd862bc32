# Package haltline.termination is asked when a run must end (docs/design.md §5).
#
# Answers:
#   mode         "finalize" (a well-formed final answer) or "reject" (an
#                error in the provider's format)
#   enforcement  line → "enforce" | "shadow"; a line not listed is enforced,
#                except semantic_repeat, which is shadow unless listed.
#                Lines are the termination reasons: max_steps, deadline,
#                token_budget, cost_budget, tool_quota, loop_detected, stalled;
#                and semantic_repeat, the loop guard's semantic detector
#                (its verdicts end a run as loop_detected, detector
#                "semantic").
#
# Data (all optional), the more specific winning:
#   data.haltline.terminations.{mode, enforcement}
#   data.haltline.terminations.tenants[tenant].{mode, enforcement}
#   data.haltline.terminations.teams[team].{mode, enforcement}
#   data.haltline.terminations.task_types[task_type].{mode, enforcement}
package haltline.termination

default _t := {}

_t := data.haltline.terminations

default _tenant := ""

_tenant := input.principal.tenant

default _team := ""

_team := input.principal.team

default _task_type := ""

_task_type := input.run.task_type

_layers := [
	_t,
	object.get(_t, ["tenants", _tenant], {}),
	object.get(_t, ["teams", _team], {}),
	object.get(_t, ["task_types", _task_type], {}),
]

_modes := [m | some l in _layers; m := l.mode]

mode := _modes[count(_modes) - 1] if count(_modes) > 0 else := "finalize"

enforcement := object.union_n([e | some l in _layers; e := object.get(l, "enforcement", {})])
