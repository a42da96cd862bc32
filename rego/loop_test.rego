package haltline.loop_test

import data.haltline.loop

test_defaults if {
	loop.same_in_row == 3 with input as {}
	loop.window == 6 with input as {}
	loop.window_repeats == 3 with input as {}
	loop.max_cycle_period == 3 with input as {}
	loop.stall_steps == 3 with input as {}
	loop.semantic_repeats == 3 with input as {}
	loop.semantic_window == 6 with input as {}
	loop.semantic_similarity == 0.5 with input as {}
	"request_id" in loop.volatile_keys with input as {}
}

test_long_by_expected_steps if {
	loop.same_in_row == 5 with input as {"run": {"expected_steps": 250}}
	loop.window == 8 with input as {"run": {"expected_steps": 250}}
	loop.same_in_row == 3 with input as {"run": {"expected_steps": 100}}
}

test_long_by_task_type if {
	loop.stall_steps == 5 with input as {"run": {"task_type": "research"}}
		with data.haltline.loops as {"long_task_types": ["research"]}
}

test_semantic_off_for_task_type if {
	loop.semantic_repeats == 0 with input as {"run": {"task_type": "batch"}}
		with data.haltline.loops as {"task_types": {"batch": {"semantic_repeats": 0}}}
	loop.semantic_window == 6 with input as {"run": {"task_type": "batch"}}
		with data.haltline.loops as {"task_types": {"batch": {"semantic_repeats": 0}}}
}

test_task_type_override if {
	loop.same_in_row == 2 with input as {"run": {"task_type": "strict"}}
		with data.haltline.loops as {"task_types": {"strict": {"same_in_row": 2}}}
}

test_extra_volatile_keys if {
	"x-amz-date" in loop.volatile_keys with input as {}
		with data.haltline.loops as {"volatile_keys": ["x-amz-date"]}
	"timestamp" in loop.volatile_keys with input as {}
		with data.haltline.loops as {"volatile_keys": ["x-amz-date"]}
}
