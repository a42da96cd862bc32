package jsonscan

import (
	"encoding/json"
	"math"
	"testing"
)

// AppendFloat writes a float as json.Marshal does.
func TestAppendFloatIsMarshal(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 0.015006, 1e-6, 9.99e-7, 1e-7, -2.5e-9, 1e20, 1e21, 123456789.125,
		1e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, 5e-324, 1.5e-10, 3e100} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendFloat([]byte("x"), f); string(got) != "x"+string(want) {
			t.Errorf("%v: %s, want %s", f, got[1:], want)
		}
	}
}

func FuzzAppendFloat(f *testing.F) {
	f.Add(0.015006)
	f.Add(-2.5e-9)
	f.Fuzz(func(t *testing.T, x float64) {
		want, err := json.Marshal(x)
		if err != nil {
			return // NaN and the infinities
		}
		if got := AppendFloat(nil, x); string(got) != string(want) {
			t.Fatalf("%v: %s, want %s", x, got, want)
		}
	})
}
