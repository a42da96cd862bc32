package accounting

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Money is an amount in pico-USD (1e-12 USD). Pico, not micro, so that a
// per-token price is an exact integer for every published price: $0.005 per
// million tokens is 5,000 pUSD per token, and tokens × price never rounds.
// An int64 holds ±9.2 million USD, far beyond any budget a ledger carries;
// arithmetic in this package saturates instead of wrapping.
type Money int64

// Picos per unit, for readers of literals in tests and callers.
const (
	PicoUSD  Money = 1
	MicroUSD Money = 1_000_000
	USDUnit  Money = 1_000_000_000_000
)

// usdDecimals is the number of decimal places Money keeps.
const usdDecimals = 12

// USD converts a float amount of dollars, rounded to the nearest pico-USD.
// It exists for callers that already hold a float (display, tests); budgets
// and prices read from text go through ParseUSD, which is exact.
func USD(f float64) Money {
	if math.IsNaN(f) {
		return 0
	}
	p := math.Round(f * 1e12)
	if p >= math.MaxInt64 {
		return math.MaxInt64
	}
	if p <= math.MinInt64 {
		return math.MinInt64
	}
	return Money(p)
}

// ParseUSD reads a decimal amount of dollars ("0.5", "12", "-0.000001")
// exactly, without going through a float. Digits past the twelfth decimal
// are an error unless they are zeros; exponents are not accepted.
func ParseUSD(s string) (Money, error) {
	v, err := parseDecimal(s, usdDecimals)
	if err != nil {
		return 0, fmt.Errorf("usd amount %q: %w", s, err)
	}
	return Money(v), nil
}

// USD returns the amount in dollars as a float, for display and metrics only.
func (m Money) USD() float64 { return float64(m) / 1e12 }

// String renders the exact amount in dollars with no trailing zeros:
// "0.071234", "0.5", "12", "-0.000001".
func (m Money) String() string {
	var buf [32]byte
	b := buf[:0]
	u := uint64(m)
	if m < 0 {
		b = append(b, '-')
		u = uint64(-(m + 1)) + 1 // no overflow at MinInt64
	}
	const unit = uint64(USDUnit)
	b = strconv.AppendUint(b, u/unit, 10)
	frac := u % unit
	if frac != 0 {
		var digits [usdDecimals]byte
		for i := usdDecimals - 1; i >= 0; i-- {
			digits[i] = byte('0' + frac%10)
			frac /= 10
		}
		n := usdDecimals
		for digits[n-1] == '0' {
			n--
		}
		b = append(b, '.')
		b = append(b, digits[:n]...)
	}
	return string(b)
}

var (
	errNotDecimal = errors.New("not a plain decimal number")
	errPrecision  = errors.New("more decimal places than can be kept exactly")
	errRange      = errors.New("out of range")
)

// parseDecimal returns the value of the decimal text s multiplied by
// 10^scale, exactly. It accepts an optional sign, digits and one optional
// point; nothing else (no exponent, no separators, no spaces).
func parseDecimal(s string, scale int) (int64, error) {
	i := 0
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	var v uint64
	const limit = uint64(math.MaxInt64)
	digits, decimals := 0, 0
	point := false
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			if point {
				return 0, errNotDecimal
			}
			point = true
			continue
		}
		if c < '0' || c > '9' {
			return 0, errNotDecimal
		}
		digits++
		if point {
			if decimals == scale {
				if c != '0' {
					return 0, errPrecision
				}
				continue // trailing zeros past the scale change nothing
			}
			decimals++
		}
		if v > (limit-uint64(c-'0'))/10 {
			return 0, errRange
		}
		v = v*10 + uint64(c-'0')
	}
	if digits == 0 {
		return 0, errNotDecimal
	}
	for ; decimals < scale; decimals++ {
		if v > limit/10 {
			return 0, errRange
		}
		v *= 10
	}
	if neg {
		return -int64(v), nil
	}
	return int64(v), nil
}

// mulSat returns n×p for non-negative operands (a negative one counts as
// zero), saturated at MaxInt64: it guards against a nonsensical count (a
// corrupt usage field, a huge max_tokens) wrapping into a negative cost.
func mulSat(n int64, p Money) Money {
	if n <= 0 || p <= 0 {
		return 0
	}
	if n > math.MaxInt64/int64(p) {
		return math.MaxInt64
	}
	return Money(n) * p
}

// addSat returns a+b saturated to the int64 range.
func addSat(a, b int64) int64 {
	s := a + b
	if a > 0 && b > 0 && s < 0 {
		return math.MaxInt64
	}
	if a < 0 && b < 0 && s >= 0 {
		return math.MinInt64
	}
	return s
}
