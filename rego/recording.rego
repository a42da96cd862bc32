# Package haltline.recording is asked once when a run starts: whether the
# gateway keeps what it needs to replay the run (issue 11) and how.
#
# Answers:
#   enabled         record the run (default false: nothing is kept)
#   sample          fraction of enabled runs recorded, 0..1 (default 1)
#   content         keep prompts and tool arguments in clear (default false:
#                   hashes and sizes only)
#   max_calls       calls kept per recording (default 500)
#   retention_days  recordings of runs ended longer ago are dropped (default 7)
#
# Data (all optional), the more specific winning:
#   data.haltline.recordings.{enabled, sample, content, max_calls, retention_days}
#   data.haltline.recordings.tenants[tenant].{…}
#   data.haltline.recordings.teams[team].{…}
#   data.haltline.recordings.task_types[task_type].{…}
package haltline.recording

default _r := {}

_r := data.haltline.recordings

default _tenant := ""

_tenant := input.principal.tenant

default _team := ""

_team := input.principal.team

default _task_type := ""

_task_type := input.run.task_type

_layers := [
	_r,
	object.get(_r, ["tenants", _tenant], {}),
	object.get(_r, ["teams", _team], {}),
	object.get(_r, ["task_types", _task_type], {}),
]

# _last is the most specific layer's value of key, when any layer sets it.
_last(key) := vs[count(vs) - 1] if {
	vs := [v | some l in _layers; v := l[key]]
	count(vs) > 0
}

default enabled := false

enabled := _last("enabled")

default sample := 1

sample := _last("sample")

default content := false

content := _last("content")

max_calls := _last("max_calls")

retention_days := _last("retention_days")
