package contextmgr

// Params shape a run's watermark. The zero value gives the default of
// docs/design.md §8: 0.6 × the model's window.
type Params struct {
	// Fraction of the window; 0 means DefaultFraction.
	Fraction float64 `json:"fraction,omitempty"`
	// P99ToolOutput, ExpectedOutput and Margin, in tokens, reserve room for
	// what the next call adds (a tool result, the model's answer) instead of
	// a fraction: when any is set the watermark is window − their sum, and
	// never above the fraction rule's ceiling of the whole window.
	P99ToolOutput  int64 `json:"p99_tool_output,omitempty"`
	ExpectedOutput int64 `json:"expected_output,omitempty"`
	Margin         int64 `json:"margin,omitempty"`
	// Tighten applies the 70% soft line (docs/design.md §5): once the run crossed
	// it, the context is compressed harder by lowering the watermark.
	Tighten bool `json:"tighten,omitempty"`
	// TightenFactor multiplies the watermark when Tighten is set; 0 means
	// DefaultTightenFactor.
	TightenFactor float64 `json:"tighten_factor,omitempty"`
}

const (
	// DefaultFraction is the context watermark of docs/design.md §8.
	DefaultFraction = 0.6
	// DefaultTightenFactor lowers the watermark past the 70% soft line.
	DefaultTightenFactor = 0.8
)

// Watermark returns the token count a forwarded request should stay under
// for a model with the given context window. It returns 0 (no watermark)
// for an unknown window (window <= 0).
func Watermark(window int64, p Params) int64 {
	if window <= 0 {
		return 0
	}
	var wm int64
	if reserve := p.P99ToolOutput + p.ExpectedOutput + p.Margin; reserve > 0 {
		wm = window - reserve
	} else {
		f := p.Fraction
		if f <= 0 || f > 1 {
			f = DefaultFraction
		}
		wm = int64(float64(window) * f)
	}
	if p.Tighten {
		t := p.TightenFactor
		if t <= 0 || t > 1 {
			t = DefaultTightenFactor
		}
		wm = int64(float64(wm) * t)
	}
	// A reserve larger than the window leaves nothing sensible; keep a
	// small floor so the rewrite still has a target rather than dropping
	// everything but the task.
	if floor := window / 10; wm < floor {
		wm = floor
	}
	return wm
}
