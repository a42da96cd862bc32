package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// windowPeriods are the window names with a known period; any other name
// must carry "period_s".
var windowPeriods = map[string]time.Duration{
	"hourly":  time.Hour,
	"daily":   24 * time.Hour,
	"weekly":  7 * 24 * time.Hour,
	"monthly": 30 * 24 * time.Hour,
}

// teamWindows reads data.haltline.teams.<team>.<window> once per load; it
// is data, not a Rego question, because it does not depend on a run.
func teamWindows(data map[string]any) (map[string][]TeamWindow, error) {
	h, _ := data["haltline"].(map[string]any)
	raw, ok := h["teams"]
	if !ok || raw == nil {
		return nil, nil
	}
	v, err := ast.InterfaceToValue(raw)
	if err != nil {
		return nil, fmt.Errorf("policy: data.haltline.teams: %w", err)
	}
	root, err := newDecoder("data.haltline.teams", v)
	if err != nil {
		return nil, err
	}
	out := map[string][]TeamWindow{}
	for _, team := range objectKeys(root.obj) {
		td, _, err := root.sub(team)
		if err != nil {
			return nil, err
		}
		for _, name := range objectKeys(td.obj) {
			wd, _, err := td.sub(name)
			if err != nil {
				return nil, err
			}
			w := TeamWindow{Team: team, Name: name, Period: windowPeriods[name]}
			var secs int64
			if err := wd.int64("period_s", &secs); err != nil {
				return nil, err
			}
			if secs > 0 {
				w.Period = time.Duration(secs) * time.Second
			}
			if w.Period == 0 {
				return nil, fmt.Errorf("policy: data.haltline.teams.%s.%s: unknown window; use hourly, daily, weekly, monthly or set period_s", team, name)
			}
			if err := wd.limitsInto(&w.Limits); err != nil {
				return nil, err
			}
			out[team] = append(out[team], w)
		}
	}
	return out, nil
}

func objectKeys(o ast.Object) []string {
	if o == nil {
		return nil
	}
	keys := make([]string, 0, o.Len())
	o.Foreach(func(k, _ *ast.Term) {
		if s, ok := k.Value.(ast.String); ok {
			keys = append(keys, string(s))
		}
	})
	slices.SortFunc(keys, strings.Compare)
	return keys
}

// cloneWindows copies so a caller can never change the loaded set.
func cloneWindows(ws []TeamWindow) []TeamWindow {
	out := slices.Clone(ws)
	for i := range out {
		if out[i].Limits.ToolQuotas != nil {
			m := make(map[string]int64, len(out[i].Limits.ToolQuotas))
			for k, v := range out[i].Limits.ToolQuotas {
				m[k] = v
			}
			out[i].Limits.ToolQuotas = m
		}
	}
	return out
}
