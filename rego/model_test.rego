package haltline.model_test

import data.haltline.model

test_default_allows_everything if {
	count(model.deny) == 0 with input as {"model": {"name": "gpt-4o-mini"}}
	not model.max_output_tokens with input as {"model": {"name": "gpt-4o-mini"}}
}

test_allow_list if {
	count(model.deny) == 0 with input as {"model": {"name": "gpt-4o-mini"}}
		with data.haltline.models as {"allowed": ["gpt-4o*", "claude-3-5-haiku"]}
	model.deny == {`model "o1" is not in the allowed list`} with input as {"model": {"name": "o1"}}
		with data.haltline.models as {"allowed": ["gpt-4o*"]}
}

test_deny_list if {
	count(model.deny) == 1 with input as {"model": {"name": "gpt-4.5-preview"}}
		with data.haltline.models as {"denied": ["gpt-4.5*"]}
}

test_output_cap if {
	model.max_output_tokens == 1000 with input as {"model": {"name": "a"}}
		with data.haltline.models as {"max_output_tokens": 1000, "per_model": {"b": {"max_output_tokens": 50}}}
	model.max_output_tokens == 50 with input as {"model": {"name": "b"}}
		with data.haltline.models as {"max_output_tokens": 1000, "per_model": {"b": {"max_output_tokens": 50}}}
}
