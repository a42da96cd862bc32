package contextmgr

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/haltline/haltline/wire"
)

type usageCase struct {
	File        string `json:"file"`
	API         string `json:"api"`
	Model       string `json:"model"`
	InputTokens int64  `json:"input_tokens"`
	Source      string `json:"source"`
}

func apiOf(s string) wire.API {
	switch s {
	case "chat":
		return wire.APIChat
	case "responses":
		return wire.APIResponses
	case "messages":
		return wire.APIMessages
	}
	return wire.APIUnknown
}

// TestEstimateAgainstRecordedUsage measures the estimator against the
// providers' own input_tokens on recorded request/response pairs; the
// bound is the error doc.go states.
func TestEstimateAgainstRecordedUsage(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/usage/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []usageCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	var sumAbs float64
	for _, c := range cases {
		body, err := os.ReadFile(filepath.Join("testdata/usage", c.File))
		if err != nil {
			t.Fatal(err)
		}
		est := Estimate(apiOf(c.API), body)
		rel := float64(est-c.InputTokens) / float64(c.InputTokens)
		sumAbs += math.Abs(rel)
		t.Logf("%-28s %-9s real %4d est %4d err %+5.1f%%", c.File, c.API, c.InputTokens, est, 100*rel)
		if math.Abs(rel) > 0.15 {
			t.Errorf("%s: estimate %d vs real %d: error %+.1f%% over the documented ±15%%", c.File, est, c.InputTokens, 100*rel)
		}
	}
	t.Logf("mean absolute error %.1f%% over %d recorded calls", 100*sumAbs/float64(len(cases)), len(cases))
}

// The size bound holds on the heaviest shapes the estimator prices.
func TestUpperBoundHolds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc string
		body string
	}{
		{"empty ids", `{"id":"","id":"","ids":["","",""],"call_id":""}`},
		{"id array", `{"id":["","","","","","","",""]}`},
		{"two-byte text", `{"t":"éééééééééé"}`},
		{"escapes", `{"t":"\u00e9\u00e9\n\t\""}`},
		{"digits", `[1234567890,1234567890]`},
		{"punctuation", `{"t":"!!!!####$$$$%%%%"}`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			for _, api := range []wire.API{wire.APIChat, wire.APIResponses, wire.APIMessages} {
				if est, bound := Estimate(api, []byte(tc.body)), upperBound(api, len(tc.body)); est > bound {
					t.Fatalf("%v: estimate %d over the bound %d", api, est, bound)
				}
			}
		})
	}
}
