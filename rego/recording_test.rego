package haltline.recording_test

import data.haltline.recording

test_off_by_default if {
	not recording.enabled with input as {}
	not recording.content with input as {}
	recording.sample == 1 with input as {}
}

test_team_enables_with_sample if {
	recording.enabled with input as {"principal": {"team": "red"}}
		with data.haltline.recordings as {"teams": {"red": {"enabled": true, "sample": 0.25}}}
	recording.sample == 0.25 with input as {"principal": {"team": "red"}}
		with data.haltline.recordings as {"teams": {"red": {"enabled": true, "sample": 0.25}}}
	not recording.enabled with input as {"principal": {"team": "blue"}}
		with data.haltline.recordings as {"teams": {"red": {"enabled": true}}}
}

test_task_type_beats_tenant if {
	not recording.content with input as {"principal": {"tenant": "acme"}, "run": {"task_type": "chat"}}
		with data.haltline.recordings as {
			"enabled": true,
			"tenants": {"acme": {"content": true}},
			"task_types": {"chat": {"content": false}},
		}
}

test_bounds if {
	recording.max_calls == 50 with input as {}
		with data.haltline.recordings as {"max_calls": 50, "retention_days": 3}
	recording.retention_days == 3 with input as {}
		with data.haltline.recordings as {"max_calls": 50, "retention_days": 3}
}
