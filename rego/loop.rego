# Package haltline.loop answers the loop and stall detector thresholds of a
# run, asked once when the run starts (docs/design.md §6, §8).
#
# Answers: same_in_row, window, window_repeats, max_cycle_period,
# stall_steps, semantic_repeats, semantic_window, semantic_similarity,
# volatile_keys (set of argument keys dropped before fingerprinting).
#
# The semantic detector (semantic_*) reports semantic_repeats calls of one
# tool within the last semantic_window steps whose argument words are
# pairwise similar at semantic_similarity or more (an estimated Jaccard
# similarity in (0, 1]) with nothing new observed in between; 0 repeats
# turns it off. Its enforcement line is semantic_repeat (haltline.termination),
# in shadow mode unless listed there.
#
# Data (all optional):
#   data.haltline.loops.long_task_types   task types that use the long thresholds
#   data.haltline.loops.defaults          thresholds overriding the defaults below
#   data.haltline.loops.task_types[tt]    thresholds for one task type (wins)
#   data.haltline.loops.volatile_keys     extra volatile keys (added to the list)
package haltline.loop

default _loop := {}

_loop := data.haltline.loops

default _task_type := ""

_task_type := input.run.task_type

# docs/design.md §8: 3 in a row, 3 of the last 6, 3 steps without a new observation.
short_thresholds := {
	"same_in_row": 3,
	"window": 6,
	"window_repeats": 3,
	"max_cycle_period": 3,
	"stall_steps": 3,
	"semantic_repeats": 3,
	"semantic_window": 6,
	"semantic_similarity": 0.5,
}

# Long tasks (more than 100 expected steps) legitimately repeat more, so
# their thresholds sit in the 5–8 range. The cycle period is the longest
# cycle looked for, not a sensitivity, so it stays the same.
long_thresholds := {
	"same_in_row": 5,
	"window": 8,
	"window_repeats": 5,
	"max_cycle_period": 3,
	"stall_steps": 5,
	"semantic_repeats": 5,
	"semantic_window": 8,
	"semantic_similarity": 0.5,
}

long if _task_type in object.get(_loop, "long_task_types", [])

long if input.run.expected_steps > 100

_base := long_thresholds if long else := short_thresholds

thresholds := object.union_n([
	_base,
	object.get(_loop, "defaults", {}),
	object.get(_loop, ["task_types", _task_type], {}),
])

same_in_row := thresholds.same_in_row

window := thresholds.window

window_repeats := thresholds.window_repeats

max_cycle_period := thresholds.max_cycle_period

stall_steps := thresholds.stall_steps

semantic_repeats := thresholds.semantic_repeats

semantic_window := thresholds.semantic_window

semantic_similarity := thresholds.semantic_similarity

# Keys whose values change on every call without meaning a new action.
default_volatile_keys := {
	"timestamp", "ts", "time", "date", "datetime", "created_at", "updated_at",
	"nonce", "request_id", "requestId", "trace_id", "traceId", "span_id",
	"spanId", "idempotency_key", "idempotencyKey", "uuid", "correlation_id",
	"correlationId", "session_token", "cursor_ts",
}

volatile_keys contains k if some k in default_volatile_keys

volatile_keys contains k if some k in object.get(_loop, "volatile_keys", [])
