package wire

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/haltline/haltline/wire/jsonscan"
)

// MaxOutputCap bounds a request's output cap (max_tokens,
// max_completion_tokens, max_output_tokens) where nothing tighter is known:
// the gateway reserves budget on that number, so it must be one a model
// could honour, far above any model's output and far below what overflows
// the cost of a call.
const MaxOutputCap = 10_000_000

// OutputCap reads the output cap of a request: raw is the member's JSON
// value as written ("" when absent). Absent or null is 0 (none asked); any
// other value must be a positive integer written as one (no sign,
// fraction or exponent), at most MaxOutputCap.
func OutputCap(key, raw string) (int64, error) {
	if raw == "" || raw == "null" {
		return 0, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 1 || n > MaxOutputCap || raw[0] == '+' || raw[0] == '0' {
		return 0, fmt.Errorf("%s must be a positive integer no greater than %d, got %.40s", key, MaxOutputCap, raw)
	}
	return n, nil
}

// ErrTooDeep refuses a body whose JSON nests deeper than jsonscan.MaxDepth.
var ErrTooDeep = fmt.Errorf("JSON nests deeper than %d levels", jsonscan.MaxDepth)

// Refusal refines err, a body the readers refused, into ErrTooDeep when
// the body nests too deeply (the readers stop there without saying why).
func Refusal(err error, body string) error {
	if err != nil && !errors.Is(err, ErrTooDeep) && jsonscan.TooDeep(body) {
		return ErrTooDeep
	}
	return err
}
