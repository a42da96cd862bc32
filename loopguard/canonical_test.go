package loopguard

import "testing"

func TestCanonical(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	tests := []struct{ desc, in, want string }{
		{"sorted keys and spacing", `{ "b" : 1 , "a" : [ true, null ,false ] }`, `{"a":[true,null,false],"b":1}`},
		{"nested sort", `{"z":{"y":1,"x":2},"a":0}`, `{"a":0,"z":{"x":2,"y":1}}`},
		{"volatile keys dropped at any depth", `{"q":"x","Timestamp":"now","inner":{"requestId":"r1","k":1}}`, `{"inner":{"k":1},"q":"x"}`},
		{"last member dropped", `{"a":1,"nonce":"n"}`, `{"a":1}`},
		{"only volatile", `{"nonce":"n"}`, `{}`},
		{"numbers one", `[1, 1.0, 1e0, 10e-1, 0.1e1, 1.000]`, `[1,1,1,1,1,1]`},
		{"negative zero", `[-0, -0.0, 0e10, 0.000]`, `[0,0,0,0]`},
		{"numbers misc", `[100, 1e2, 1.5, 0.001, 1e-7, 1e21, 1e22, -12.50, 123456789012345678901234]`, `[100,100,1.5,0.001,1e-7,1e+21,1e+22,-12.5,1.23456789012345678901234e+23]`},
		{"exact decimals", `[0.1, 0.10000000000000001]`, `[0.1,0.10000000000000001]`},
		{"rfc3339", `"query logs since 2024-05-01T12:00:00.123Z please"`, `"query logs since <ts> please"`},
		{"space datetime", `"at 2024-05-01 12:00:00"`, `"at <ts>"`},
		{"offset datetime", `"2024/05/01 12:00+02:00"`, `"<ts>"`},
		{"compact", `"run-20240501T120000Z"`, `"run-<ts>"`},
		{"epoch suffix", `"errors_1714567890"`, `"errors_<epoch>"`},
		{"epoch glued", `"errors1714567890123"`, `"errors<epoch>"`},
		{"date alone kept", `"report 2024-05-01"`, `"report 2024-05-01"`},
		{"uuid", `"id 123e4567-e89b-12d3-a456-426614174000."`, `"id <uuid>."`},
		{"hex", `"trace 4bf92f3577b34da6a3ce929d0e0e4736"`, `"trace <hex>"`},
		{"short hex kept", `"commit abc123"`, `"commit abc123"`},
		{"base64 id", `"cursor eyJvZmZzZXQiOjIwfQ9Xk2L"`, `"cursor <id>"`},
		{"camel case kept", `"getUserProfileById2024x"`, `"getUserProfileById2024x"`},
		{"clock", `"[12:00:01] no data"`, `"[<ts>] no data"`},
		{"escapes", `"a\u0041\n\"\/\ud83d\ude00"`, "\"aA\\n\\\"/\U0001F600\""},
		{"lone surrogate", `"\ud800x"`, "\"\uFFFDx\""},
		{"text", "  no   data\n\n", `"no data"`},
		{"text with ts", "no data as of 2024-05-01T12:00:00Z\r\n", `"no data as of <ts>"`},
		{"empty", "", `""`},
		{"trailing garbage", `{"a":1} x`, `"{\"a\":1} x"`},
		{"key not normalised", `{"2024-05-01T12:00:00Z":1}`, `{"2024-05-01T12:00:00Z":1}`},
		{"duplicate keys", `{"a":2,"a":1}`, `{"a":1,"a":2}`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			got := string(c.Canonical(nil, []byte(tc.in)))
			if got != tc.want {
				t.Errorf("Canonical(%q)\n got %s\nwant %s", tc.in, got, tc.want)
			}
			if again := string(c.Canonical(nil, []byte(got))); again != got {
				t.Errorf("not idempotent: %s -> %s", got, again)
			}
		})
	}
}
