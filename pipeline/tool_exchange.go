package pipeline

import "context"

// ToolExchange is one tool call as a front end drives it, in the shape of
// a model call's Exchange:
//
//	tx := p.OpenTool(ctx, call, set) // the gates (BeginTool); tx.Turn().Answer set: the gateway answers
//	res := tx.Finish(out)            // meter, record, store the result (FinishTool)
//
// set receives the run headers (X-Run-*) with the gates' answer, or with
// Finish: every answer of a tool route carries them.
type ToolExchange struct {
	p   *Pipeline
	ctx context.Context
	tt  *ToolTurn
	set func(name, value string)
}

// OpenTool runs the gates for one tool call (BeginTool). When they answer
// it, set has the run headers already and Finish must not follow.
func (p *Pipeline) OpenTool(ctx context.Context, call *ToolCall, set func(name, value string)) *ToolExchange {
	tx := &ToolExchange{p: p, ctx: ctx, tt: p.BeginTool(ctx, call), set: set}
	if tx.tt.Answer != nil {
		p.ToolHeaders(tx.tt, set)
	}
	return tx
}

// Turn is the call's turn: the gates' Answer, the forwarded call's
// timeout, context and the run's remaining time.
func (tx *ToolExchange) Turn() *ToolTurn { return tx.tt }

// Finish settles the call (FinishTool) and gives set the run headers as
// the result left the run.
func (tx *ToolExchange) Finish(out ToolOutcome) StoredResult {
	res := tx.p.FinishTool(tx.ctx, tx.tt, out)
	tx.p.ToolHeaders(tx.tt, tx.set)
	return res
}
