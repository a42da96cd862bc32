package haltline.termination_test

import data.haltline.termination

test_defaults if {
	termination.mode == "finalize" with input as {}
	termination.enforcement == {} with input as {}
}

test_reject_for_team if {
	termination.mode == "reject" with input as {"principal": {"team": "red"}}
		with data.haltline.terminations as {"teams": {"red": {"mode": "reject"}}}
	termination.mode == "finalize" with input as {"principal": {"team": "blue"}}
		with data.haltline.terminations as {"teams": {"red": {"mode": "reject"}}}
}

test_task_type_beats_tenant if {
	termination.mode == "finalize" with input as {"principal": {"tenant": "acme"}, "run": {"task_type": "chat"}}
		with data.haltline.terminations as {
			"tenants": {"acme": {"mode": "reject"}},
			"task_types": {"chat": {"mode": "finalize"}},
		}
}

test_shadow_lines if {
	e := termination.enforcement with input as {"principal": {"tenant": "acme"}}
		with data.haltline.terminations as {
			"enforcement": {"max_steps": "shadow"},
			"tenants": {"acme": {"enforcement": {"cost_budget": "shadow"}}},
		}
	e == {"max_steps": "shadow", "cost_budget": "shadow"}
}
