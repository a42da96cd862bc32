package policy

import (
	"context"
	"fmt"
	"reflect"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// The questions, one per Rego package (docs/design.md §11).
type questionID int

const (
	qBudget questionID = iota
	qModel
	qTool
	qLoop
	qTermination
	qRecording // recording.go
	numQuestions
)

var packages = [numQuestions]string{
	qBudget:      "haltline.budget",
	qModel:       "haltline.model",
	qTool:        "haltline.tool",
	qLoop:        "haltline.loop",
	qTermination: "haltline.termination",
	qRecording:   "haltline.recording",
}

// question is one prepared query over the answer keys of a package.
type question struct {
	id  questionID
	pkg string
	pq  rego.PreparedEvalQuery
	// constant is set when the package gives the same answer for every
	// input (found by partial evaluation at load), so the engine answers
	// without evaluating; constantValue holds the answer keys.
	constant      bool
	constantValue ast.Value
	// answer is constantValue decoded into the question's Go type.
	answer any
	// memoised says the set's memo holds this question's answers, keyed
	// by the input values key names; false when what the package reads
	// cannot be bounded (see inputReads).
	memoised bool
	key      []keyOp
}

// set is one immutable compiled policy set; a reload builds a new one and
// swaps it in whole.
type set struct {
	version   uint64
	questions [numQuestions]*question
	teams     map[string][]TeamWindow
	// needsArgs and needsHeaders say whether any loaded rule reads
	// input.tool.arguments or input.headers, so the per-call input skips
	// converting them when nothing would look.
	needsArgs    bool
	needsHeaders bool
	sources      []string // file names, for logs
	// memo holds the answers of the memoised questions (memo.go); nil
	// when memoisation is off.
	memo *memo
}

// keepTerm makes Eval hand back the result as an AST term, saving the
// conversion to Go maps that decode would only undo.
func keepTerm(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }

// newSet compiles data and modules into prepared queries and smoke-evaluates
// every question once, so a policy that cannot answer is refused at load
// rather than at the first call.
// memoBytes bounds its memo (0 or less: none).
func newSet(ctx context.Context, srcs []source, data map[string]any, c *ast.Compiler, version uint64, memoBytes int64) (*set, error) {
	// AST values on read spare a Go-to-AST conversion of the data each
	// evaluation reads; nothing ever writes to this store.
	store := inmem.NewFromObjectWithOpts(data, inmem.OptReturnASTValuesOnRead(true))
	s := &set{version: version, memo: newMemo(memoBytes)}
	for _, src := range srcs {
		if !src.test {
			s.sources = append(s.sources, src.name)
		}
	}
	s.needsArgs, s.needsHeaders = inputNeeds(c)
	nondet := nondeterministic(capabilities())

	txn, err := store.NewTransaction(ctx, storage.TransactionParams{})
	if err != nil {
		return nil, fmt.Errorf("policy: open store: %w", err)
	}
	defer store.Abort(ctx, txn)

	for id, pkg := range packages {
		q := &question{id: questionID(id), pkg: pkg}
		pq, err := rego.New(
			rego.ParsedQuery(answerQuery(questionID(id))),
			rego.Compiler(c),
			rego.Store(store),
			rego.GenerateJSON(keepTerm),
		).PrepareForEval(ctx)
		if err != nil {
			return nil, fmt.Errorf("policy: prepare %s: %w", pkg, err)
		}
		q.pq = pq
		s.questions[id] = q
		findConstant(ctx, q, c, store, txn)
		if paths, ok := inputReads(c, pkg, nondet); ok && s.memo != nil {
			q.key = keyPlan(q.id, paths)
			q.memoised = true
		}
	}

	teams, err := teamWindows(data)
	if err != nil {
		return nil, err
	}
	s.teams = teams

	if err := s.smoke(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// answerQuery reads only the answer keys of the package document:
// {k: v | some k in [keys]; v := data.<pkg>[k]}. Asking for the whole
// package would also evaluate every helper rule, which costs allocations
// and time for answers nobody reads; and a key the package leaves
// undefined is simply absent from the object.
func answerQuery(id questionID) ast.Body {
	keys := make([]*ast.Term, len(answerKeys[id]))
	for i, k := range answerKeys[id] {
		keys[i] = ast.StringTerm(k)
	}
	q := fmt.Sprintf("{__k: __v | some __k in %s; __v := data.%s[__k]}", ast.ArrayTerm(keys...), packages[id])
	return ast.MustParseBodyWithOpts(q, ast.ParserOptions{RegoVersion: ast.RegoV1})
}

// answerKeys are the keys of each package document that Go reads; helper
// rules (which may well read input) do not matter to the answer.
var answerKeys = [numQuestions][]string{
	qBudget:      {"limits"},
	qModel:       {"deny", "max_output_tokens", "allowed"},
	qTool:        {"decision"},
	qLoop:        {"same_in_row", "window", "window_repeats", "max_cycle_period", "stall_steps", "semantic_repeats", "semantic_window", "semantic_similarity", "volatile_keys"},
	qTermination: {"mode", "enforcement"},
	qRecording:   recordingKeys,
}

// findConstant partially evaluates each answer key with the whole input
// unknown. When none depends on input, the answer is the same for every
// input and is kept. In doubt (an error, a residual that is not one
// ground binding) the question is evaluated per call.
// Nondeterministic builtins are never folded by partial evaluation, so
// their results never become constants.
func findConstant(ctx context.Context, q *question, c *ast.Compiler, store storage.Store, txn storage.Transaction) {
	var items [][2]*ast.Term
	for _, key := range answerKeys[q.id] {
		ref := ast.MustParseRef("data." + q.pkg).Append(ast.StringTerm(key))
		v, defined, ok := partialConstant(ctx, ref, c, store, txn)
		if !ok {
			return
		}
		if defined {
			items = append(items, [2]*ast.Term{ast.StringTerm(key), ast.NewTerm(v)})
		}
	}
	q.constant, q.constantValue = true, ast.NewObject(items...)
}

// partialConstant reports whether ref has the same value (or is undefined)
// for every input.
func partialConstant(ctx context.Context, ref ast.Ref, c *ast.Compiler, store storage.Store, txn storage.Transaction) (v ast.Value, defined, ok bool) {
	x := ast.VarTerm("__haltline_answer")
	pq, err := rego.New(
		rego.ParsedQuery(ast.NewBody(ast.Equality.Expr(x, ast.RefTerm(ref...)))),
		rego.Compiler(c),
		rego.Store(store),
		rego.Transaction(txn),
		rego.Unknowns([]string{"input"}),
	).Partial(ctx)
	if err != nil {
		return nil, false, false
	}
	// Support modules do not matter: no query, or one ground binding, can
	// not refer to them.
	switch len(pq.Queries) {
	case 0:
		return nil, false, true
	case 1:
		b := pq.Queries[0]
		if len(b) != 1 || !b[0].IsEquality() || len(b[0].With) > 0 || b[0].Negated {
			return nil, false, false
		}
		l, r := b[0].Operand(0), b[0].Operand(1)
		if !l.Equal(x) {
			l, r = r, l
		}
		if !l.Equal(x) || !r.IsGround() {
			return nil, false, false
		}
		return r.Value, true, true
	}
	return nil, false, false
}

// smoke asks each question with an empty input and decodes the answer; a
// constant answer is decoded once here and kept.
func (s *set) smoke(ctx context.Context) error {
	var zero RunInput
	for id, q := range s.questions {
		v, err := s.evalFresh(ctx, questionID(id), zeroInput(questionID(id), zero, s))
		if err != nil {
			return err
		}
		ans, err := decodeAnswer(questionID(id), v)
		if err != nil {
			return err
		}
		if !q.constant {
			continue
		}
		// Partial evaluation and evaluation must agree on the empty
		// input; if they do not, trust evaluation and drop the fold.
		folded, err := decodeAnswer(questionID(id), q.constantValue)
		if err != nil || !reflect.DeepEqual(folded, ans) {
			q.constant = false
			continue
		}
		q.answer = folded
	}
	return nil
}

func zeroInput(id questionID, in RunInput, s *set) ast.Value {
	switch id {
	case qModel:
		return modelValue(ModelInput{RunInput: in}, s)
	case qTool:
		return toolValue(ToolInput{RunInput: in}, s)
	default:
		return runValue(in, s)
	}
}

// evalFresh evaluates, ignoring any constant; nil means undefined.
func (s *set) evalFresh(ctx context.Context, id questionID, input ast.Value) (ast.Value, error) {
	q := s.questions[id]
	rs, err := q.pq.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return nil, &EvalError{Package: q.pkg, Err: err}
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, nil
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return nil, &EvalError{Package: q.pkg, Err: fmt.Errorf("unexpected result %T", rs[0].Expressions[0].Value)}
	}
	return t.Value, nil
}

// EvalError is an evaluation that failed; the caller must refuse, never
// allow.
type EvalError struct {
	Package string
	Err     error
}

func (e *EvalError) Error() string { return "policy: evaluate " + e.Package + ": " + e.Err.Error() }

func (e *EvalError) Unwrap() error { return e.Err }

// inputNeeds walks every loaded rule for references to input.tool.arguments
// and input.headers. A reference it cannot rule out (input itself, input[x],
// input.tool, `with input as`) counts as a read.
func inputNeeds(c *ast.Compiler) (args, headers bool) {
	for _, m := range c.Modules {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if !r.HasPrefix(ast.InputRootRef) {
				return false
			}
			if refMayRead(r, "tool", "arguments") {
				args = true
			}
			if refMayRead(r, "headers") {
				headers = true
			}
			return false
		})
	}
	return args, headers
}

// refMayRead reports whether ref (rooted at input) can reach input.<path>.
func refMayRead(ref ast.Ref, path ...string) bool {
	for i, p := range path {
		if len(ref) <= i+1 {
			return true // a prefix of the path: the whole object is read
		}
		s, ok := ref[i+1].Value.(ast.String)
		if !ok {
			return true // input[x]: could be anything
		}
		if string(s) != p {
			return false
		}
	}
	return true
}
