package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// Summary calls: when policy names a summariser model, the dropped turns
// are summarised by that model through the same upstream, charged to the
// run (a model call, its tokens and cost; not an agent step). Without a
// model, without budget for it, or when it fails, the context manager falls
// back to its extractive summary.
const (
	summaryInstruction = "You compress an AI agent's working history. Summarise the turns below " +
		"in at most 200 words: what was asked, what was done, what was found, what is still open. " +
		"Then list each hard constraint or confirmed fact on its own line as `FACT key: value`."
	// summaryMaxOutput keeps the answer within the response text the
	// gateway reads back (wire.TextKeep).
	summaryMaxOutput = 400
	// summaryInputChars bounds the history sent to the summariser.
	summaryInputChars = 48_000
)

var errNoSummaryBudget = errors.New("no budget left for a summary call")

// summariser returns the context manager's summary callback for this call,
// or nil when the extractive summary must do. The caller holds the run's
// lock for the whole rewrite.
func (p *Pipeline) summariser(t *Turn, g *governance, now time.Time) func(context.Context, string, []contextmgr.Turn) (string, map[string]string, error) {
	model := g.limits.SummariserModel
	builder, ok := t.codec.(wire.RequestBuilder)
	if model == "" || t.Call.Upstream == nil || !ok {
		return nil
	}
	return func(ctx context.Context, prev string, dropped []contextmgr.Turn) (string, map[string]string, error) {
		body := builder.BuildRequest(model, summaryInstruction, renderTurns(prev, dropped), summaryMaxOutput)
		price, priced := p.catalog.Lookup(model)
		est := accounting.ReserveInput(contextmgr.Estimate(t.Req.API, body))
		want := accounting.Vector{Tokens: est + summaryMaxOutput, InputTokens: est,
			OutputTokens: summaryMaxOutput, Cost: price.WorstCase(est, summaryMaxOutput)}
		if !priced && g.limits.MaxCostUSD > 0 {
			return "", nil, fmt.Errorf("summariser model %q has no price", model)
		}
		h, short, err := p.book.Reserve(ctx, g.ledgers, want, false, p.opts.Lease, now)
		if err != nil {
			return "", nil, err
		}
		if short != nil {
			return "", nil, errNoSummaryBudget
		}
		r := t.run
		r.Counters.ModelCalls++
		status, resp, err := t.Call.Upstream(ctx, body)
		var parsed wire.Response
		if err == nil && status == 200 {
			parsed, err = t.codec.ParseResponse(resp)
		} else if err == nil {
			err = fmt.Errorf("summariser answered %d", status)
		}
		if err != nil || !parsed.HasUsage {
			_ = p.book.Release(context.WithoutCancel(ctx), h)
			r.Record(now, runstate.Event{Type: runstate.EventSummary, Model: model, Status: status, Detail: "failed: " + errDetail(err)})
			if err == nil {
				err = errors.New("summariser answered without usage")
			}
			return "", nil, err
		}
		u := parsed.Usage
		var cost accounting.Money
		if priced {
			cost = price.Cost(t.Req.API.Provider(), u)
		}
		actual := accounting.Vector{Tokens: u.InputTokens + u.OutputTokens, InputTokens: u.InputTokens,
			OutputTokens: u.OutputTokens, Cost: cost}
		if err := p.book.Settle(context.WithoutCancel(ctx), h, actual, now); err != nil {
			p.deferSettle(h, actual, now)
		}
		c := &r.Counters
		c.InputTokens += u.InputTokens
		c.OutputTokens += u.OutputTokens
		c.ReasoningTokens += u.ReasoningTokens
		c.CachedTokens += u.CachedTokens
		c.CacheWriteTokens += u.CacheWriteTokens
		c.ActualCost += int64(cost)
		label := "other"
		if priced {
			label = model
		}
		p.obs.Usage(t.Req.API.Provider(), label, u, cost)
		r.Record(now, runstate.Event{Type: runstate.EventSummary, Model: model, Status: 200,
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: cost.USD()})
		summary, facts := parseSummary(parsed.Text)
		if summary == "" {
			return "", nil, errors.New("summariser gave an empty summary")
		}
		return summary, facts, nil
	}
}

// renderTurns writes the previous summary and the dropped turns as plain
// text for the summariser, bounded.
func renderTurns(prev string, dropped []contextmgr.Turn) string {
	var b strings.Builder
	if prev != "" {
		b.WriteString("Earlier summary:\n")
		b.WriteString(prev)
		b.WriteString("\n\n")
	}
	for _, t := range dropped {
		if b.Len() > summaryInputChars {
			b.WriteString("\n[… older turns left out …]\n")
			break
		}
		text := strings.TrimSpace(t.Text + " " + t.UserText)
		if text != "" {
			fmt.Fprintf(&b, "%s: %s\n", t.Role, clip(text, 2000))
		}
		for _, c := range t.Calls {
			fmt.Fprintf(&b, "%s called %s(%s)\n", t.Role, c.Name, clip(c.Arguments, 300))
		}
		for _, r := range t.Results {
			fmt.Fprintf(&b, "result of %s: %s\n", r.CallID, clip(r.Text, 1500))
		}
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseSummary splits the summariser's answer into the summary and its
// `FACT key: value` lines.
func parseSummary(text string) (string, map[string]string) {
	var facts map[string]string
	var keep []string
	for line := range strings.SplitSeq(text, "\n") {
		trimmed := strings.TrimSpace(strings.Trim(strings.TrimSpace(line), "`*- "))
		if rest, ok := strings.CutPrefix(trimmed, "FACT "); ok {
			if k, v, ok := strings.Cut(rest, ":"); ok && strings.TrimSpace(k) != "" {
				if facts == nil {
					facts = map[string]string{}
				}
				facts[strings.TrimSpace(k)] = strings.TrimSpace(v)
				continue
			}
		}
		keep = append(keep, line)
	}
	return strings.TrimSpace(strings.Join(keep, "\n")), facts
}
