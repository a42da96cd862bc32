package haltline.budget_test

import data.haltline.budget

test_defaults if {
	l := budget.limits with input as {}
	l.max_steps == 100
	l.deadline_ms == 1800000
	l.soft_compress == 0.7
	l.soft_wrapup == 0.9
	l.final_reserve == 0.1
	l.paused_time == "flow"
	l.default_max_output_tokens == 4096
	l.min_output_tokens == 1024
	not l.max_cost_usd
	not l.max_tokens
}

test_task_type_override if {
	l := budget.limits with input as {"run": {"task_type": "lookup"}}
		with data.haltline.budgets as {"task_types": {"lookup": {"max_steps": 10, "max_cost_usd": 0.5}}}
	l.max_steps == 10
	l.max_cost_usd == 0.5
	l.deadline_ms == 1800000
}

test_team_override if {
	l := budget.limits with input as {"principal": {"team": "red"}}
		with data.haltline.budgets as {"teams": {"red": {"max_tokens": 50000}}}
	l.max_tokens == 50000
	l.max_steps == 100
}

test_task_type_beats_team if {
	l := budget.limits with input as {"principal": {"team": "red"}, "run": {"task_type": "t"}}
		with data.haltline.budgets as {
			"teams": {"red": {"max_steps": 50, "tool_quotas": {"search": 5}}},
			"task_types": {"t": {"max_steps": 20, "tool_quotas": {"fetch": 2}}},
		}
	l.max_steps == 20
	l.tool_quotas == {"search": 5, "fetch": 2}
}

test_other_team_untouched if {
	l := budget.limits with input as {"principal": {"team": "blue"}}
		with data.haltline.budgets as {"teams": {"red": {"max_steps": 5}}}
	l.max_steps == 100
}
