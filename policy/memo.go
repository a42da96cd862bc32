package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/open-policy-agent/opa/v1/ast"
)

// Answers are memoised per compiled set: a question whose package (with
// every rule and function it reaches) reads only some input paths gets the
// same answer for the same values at those paths, for as long as the set
// (rules and data) stays the same. The key is those values and nothing else,
// so e.g. the default budget policy, which reads tenant, team, user, agent
// and task type, answers every run of one agent in one team from the cache.
// A reload builds a new set, and with it an empty cache.

// field is one input value a key can hold. Objects the engine builds with a
// fixed shape (principal, run, model, tool) are expanded into their fields,
// so a policy reading input.principal whole is keyed on its four fields.
type field uint8

const (
	fTenant field = iota
	fTeam
	fUser
	fKeyID
	fRunID
	fSessionID
	fParentID
	fAgentID
	fTaskType
	fState
	fExpectedSteps
	fSteps
	fModelCalls
	fToolCalls
	fInputTokens
	fOutputTokens
	fElapsedMs
	fCostUSD
	fHeaders // the whole allow-listed header map
	fHeader  // one header, named by keyOp.name
	fModelName
	fModelProvider
	fModelStream
	fModelMaxOutput
	fToolName
	fToolServer
	fToolLevel
	fToolFingerprint
	fToolHints // the whole hint map
	fToolHint  // one hint, named by keyOp.name
	fToolArgs  // a hash of the raw arguments
)

// The field names mirror input.go, which builds the objects the policy sees.
var (
	principalFields = map[string]field{"tenant": fTenant, "team": fTeam, "user": fUser, "key_id": fKeyID}
	runFields       = map[string]field{
		"id": fRunID, "session_id": fSessionID, "parent_id": fParentID, "agent_id": fAgentID,
		"task_type": fTaskType, "state": fState, "expected_steps": fExpectedSteps, "steps": fSteps,
		"model_calls": fModelCalls, "tool_calls": fToolCalls, "input_tokens": fInputTokens,
		"output_tokens": fOutputTokens, "elapsed_ms": fElapsedMs, "cost_usd": fCostUSD,
	}
	modelFields = map[string]field{"name": fModelName, "provider": fModelProvider, "stream": fModelStream, "max_output_tokens": fModelMaxOutput}
	toolFields  = map[string]field{"name": fToolName, "server": fToolServer, "level": fToolLevel, "fingerprint": fToolFingerprint}
)

// keyOp appends one input value to a key.
type keyOp struct {
	field field
	name  string // the header or hint name of fHeader and fToolHint
}

// String is the input path the op keys on, e.g. "principal.tenant".
func (o keyOp) String() string {
	for prefix, fields := range map[string]map[string]field{"principal.": principalFields, "run.": runFields, "model.": modelFields, "tool.": toolFields} {
		for name, f := range fields {
			if f == o.field {
				return prefix + name
			}
		}
	}
	switch o.field {
	case fHeaders:
		return "headers"
	case fHeader:
		return "headers." + o.name
	case fToolHints:
		return "tool.hints"
	case fToolHint:
		return "tool.hints." + o.name
	case fToolArgs:
		return "tool.arguments"
	}
	return "?"
}

// maxKeyLen bounds what one entry may cost; an input whose key is longer
// (huge headers, say) is evaluated and not cached.
const maxKeyLen = 1024

// inputReads finds the input paths that the answer of package pkg can
// depend on: it walks every rule of the package and, transitively, every
// rule and function those rules refer to, collecting the ground prefix of
// each ref into input (input.tool.hints[h] reads input.tool.hints). It
// reports ok=false, and the question is never cached, when it cannot bound
// what is read or the answer is not a function of input and data alone:
// input read whole (input, walk(input), json.filter(input, …), `with input
// as`), a ref whose first step into input is not a constant (input[x]), or a
// nondeterministic builtin (time.now_ns, rand.intn, …).
func inputReads(c *ast.Compiler, pkg string, nondet map[string]bool) (paths [][]string, ok bool) {
	ok = true
	// data[x] reaches data.system too.
	all := ast.RulesOptions{IncludeHiddenModules: true}
	seen := map[*ast.Rule]bool{}
	// The answer query reads data.<pkg>[k]: everything under the package
	// counts, helpers included, since answer keys may use any of them.
	queue := c.GetRulesDynamicWithOpts(ast.MustParseRef("data."+pkg), all)
	for len(queue) > 0 && ok {
		r := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if seen[r] {
			continue
		}
		seen[r] = true
		ast.WalkRefs(r, func(ref ast.Ref) bool {
			switch {
			case ref.HasPrefix(ast.InputRootRef):
				var p []string
				for _, t := range ref[1:] {
					s, isStr := t.Value.(ast.String)
					if !isStr {
						break
					}
					p = append(p, string(s))
				}
				if len(p) == 0 {
					ok = false
				}
				paths = append(paths, p)
			case ref.HasPrefix(ast.DefaultRootRef):
				// Rules and functions (a call's operator is a ref too);
				// a dynamic ref yields every rule it could reach.
				queue = append(queue, c.GetRulesDynamicWithOpts(ref, all)...)
			}
			return false // nested refs (data.x[input.y]) are visited too
		})
		ast.WalkNodes(r, func(n ast.Node) bool {
			var op ast.Ref
			switch x := n.(type) {
			case *ast.Expr:
				if x.IsCall() {
					op = x.Operator()
				}
			case *ast.Term:
				if call, isCall := x.Value.(ast.Call); isCall && len(call) > 0 {
					op, _ = call[0].Value.(ast.Ref)
				}
			}
			if op != nil && nondet[op.String()] {
				ok = false
			}
			return !ok
		})
	}
	if !ok {
		return nil, false
	}
	return paths, true
}

// nondeterministic names the builtins whose result is not a function of
// their arguments; a package calling one is never cached.
func nondeterministic(caps *ast.Capabilities) map[string]bool {
	m := map[string]bool{}
	for _, b := range caps.Builtins {
		if b.Nondeterministic {
			m[b.Name] = true
		}
	}
	return m
}

// keyPlan turns the paths a package reads into the key fields of question
// id, in a fixed order. A path the question's input never has (input.tool in
// the budget question, input.principal.nickname) is always undefined and
// adds nothing; a path below a field (input.run.id.x) is keyed on the field.
func keyPlan(id questionID, paths [][]string) []keyOp {
	var ops []keyOp
	add := func(fields map[string]field, p []string) {
		if len(p) == 0 {
			for _, f := range fields {
				ops = append(ops, keyOp{field: f})
			}
			return
		}
		if f, ok := fields[p[0]]; ok {
			ops = append(ops, keyOp{field: f})
		}
	}
	for _, p := range paths {
		switch p[0] {
		case "principal":
			add(principalFields, p[1:])
		case "run":
			add(runFields, p[1:])
		case "headers":
			if len(p) == 1 {
				ops = append(ops, keyOp{field: fHeaders})
			} else {
				ops = append(ops, keyOp{field: fHeader, name: p[1]})
			}
		case "model":
			if id == qModel {
				add(modelFields, p[1:])
			}
		case "tool":
			if id != qTool {
				continue
			}
			switch {
			case len(p) == 1:
				add(toolFields, nil)
				ops = append(ops, keyOp{field: fToolHints}, keyOp{field: fToolArgs})
			case p[1] == "hints" && len(p) == 2:
				ops = append(ops, keyOp{field: fToolHints})
			case p[1] == "hints":
				ops = append(ops, keyOp{field: fToolHint, name: p[2]})
			case p[1] == "arguments":
				ops = append(ops, keyOp{field: fToolArgs})
			default:
				add(toolFields, p[1:])
			}
		}
	}
	slices.SortFunc(ops, func(a, b keyOp) int {
		return cmp.Or(cmp.Compare(a.field, b.field), strings.Compare(a.name, b.name))
	})
	return slices.Compact(ops)
}

// appendKey appends the values the plan names, each encoded so that the
// concatenation is unambiguous (strings length-prefixed, maps counted and
// sorted, presence marked). Equal keys mean equal values at every path the
// package reads, so equal answers. m and t are nil for the questions without
// a model or tool. Values the input builder leaves out (headers or arguments
// no rule reads) are keyed as absent, as the policy sees them.
func appendKey(b []byte, ops []keyOp, s *set, in *RunInput, m *ModelInfo, t *ToolInfo) []byte {
	for _, op := range ops {
		switch op.field {
		case fTenant:
			b = appendStr(b, in.Principal.Tenant)
		case fTeam:
			b = appendStr(b, in.Principal.Team)
		case fUser:
			b = appendStr(b, in.Principal.User)
		case fKeyID:
			b = appendStr(b, in.Principal.KeyID)
		case fRunID:
			b = appendStr(b, in.Run.ID)
		case fSessionID:
			b = appendStr(b, in.Run.SessionID)
		case fParentID:
			b = appendStr(b, in.Run.ParentID)
		case fAgentID:
			b = appendStr(b, in.Run.AgentID)
		case fTaskType:
			b = appendStr(b, in.Run.TaskType)
		case fState:
			b = appendStr(b, in.Run.State)
		case fExpectedSteps:
			b = appendInt(b, in.Run.ExpectedSteps)
		case fSteps:
			b = appendInt(b, in.Run.Steps)
		case fModelCalls:
			b = appendInt(b, in.Run.ModelCalls)
		case fToolCalls:
			b = appendInt(b, in.Run.ToolCalls)
		case fInputTokens:
			b = appendInt(b, in.Run.InputTokens)
		case fOutputTokens:
			b = appendInt(b, in.Run.OutputTokens)
		case fElapsedMs:
			b = appendInt(b, in.Run.ElapsedMs)
		case fCostUSD:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(in.Run.CostUSD))
		case fHeaders:
			if !s.needsHeaders {
				b = append(b, 0)
				continue
			}
			b = appendStrMap(b, in.Headers)
		case fHeader:
			// Absent and present-but-empty differ to a policy.
			v, ok := in.Headers[op.name]
			if ok && s.needsHeaders {
				b = appendStr(append(b, 1), v)
			} else {
				b = append(b, 0)
			}
		case fModelName:
			b = appendStr(b, m.Name)
		case fModelProvider:
			b = appendStr(b, m.Provider)
		case fModelStream:
			b = appendBool(b, m.Stream)
		case fModelMaxOutput:
			b = appendInt(b, m.MaxOutputTokens)
		case fToolName:
			b = appendStr(b, t.Name)
		case fToolServer:
			b = appendStr(b, t.Server)
		case fToolLevel:
			b = appendStr(b, t.Level)
		case fToolFingerprint:
			b = appendStr(b, t.Fingerprint)
		case fToolHints:
			b = appendBoolMap(b, t.Hints)
		case fToolHint:
			v, ok := t.Hints[op.name]
			b = appendBool(appendBool(b, ok), v)
		case fToolArgs:
			// The policy sees the parsed arguments, a function of the raw
			// bytes; SHA-256 keeps the key short and, unlike a fast hash,
			// cannot be steered by a model into a collision with another
			// call's cached answer.
			if !s.needsArgs || len(t.Arguments) == 0 {
				b = append(b, 0)
				continue
			}
			sum := sha256.Sum256(t.Arguments)
			b = append(append(b, 1), sum[:]...)
		}
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendInt(b []byte, n int64) []byte { return binary.LittleEndian.AppendUint64(b, uint64(n)) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// sortedKeys returns the keys of m in order, in small when they fit.
func sortedKeys[V any](small *[16]string, m map[string]V) []string {
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// The map appenders write the count and the entries sorted by key: equal
// maps, equal bytes. An empty map is keyed like a missing one, as input.go
// leaves both out of the input. (Concrete rather than generic over an
// encoder func: a func value would make the key buffer escape.)

func appendStrMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	if len(m) == 0 {
		return b
	}
	var small [16]string
	for _, k := range sortedKeys(&small, m) {
		b = appendStr(appendStr(b, k), m[k])
	}
	return b
}

func appendBoolMap(b []byte, m map[string]bool) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	if len(m) == 0 {
		return b
	}
	var small [16]string
	for _, k := range sortedKeys(&small, m) {
		b = appendBool(appendStr(b, k), m[k])
	}
	return b
}

// memo is the answer cache of one compiled set, shared by its questions:
// a ristretto cache bounded by what its entries are estimated to cost in
// bytes, holding decoded answers (Limits, ToolDecision, …). A reload
// builds a new set and with it an empty memo; the old one is closed once
// nothing refers to it (newMemo), since an ask in flight may still be
// using it.
//
// ristretto may drop a Set (a full buffer, its admission policy): the
// answer is then evaluated again on the next ask, which is all a memo
// may cost.
type memo struct {
	c    *ristretto.Cache[uint64, memoEntry]
	seed maphash.Seed
	// collide makes every key hash alike, for tests.
	collide bool
}

// memoEntry is one answer and the whole key it was stored under. The
// cache is keyed by a seeded hash of the key (handing ristretto the key's
// bytes would move the caller's stack buffer to the heap, an allocation
// per ask): a hit is checked against the key itself, so inputs whose
// hashes collide (keys hold caller-chosen strings) never share an answer.
type memoEntry struct {
	key    string
	answer any
}

// DefaultMemoBytes bounds a set's memo when Options.MemoBytes is 0.
const DefaultMemoBytes = 8 << 20

// memoEntryBytes is what an entry costs besides its key: ristretto's item
// and maps, the entry, and a decoded answer with its maps and slices.
const memoEntryBytes = 320

// newMemo returns a memo bounded by maxBytes, or nil (no memoisation)
// when maxBytes is not positive.
func newMemo(maxBytes int64) *memo {
	if maxBytes <= 0 {
		return nil
	}
	// ristretto counts the frequency of about ten keys per entry it can hold.
	counters := max(10*maxBytes/memoEntryBytes, 1000)
	c, err := ristretto.NewCache(&ristretto.Config[uint64, memoEntry]{
		NumCounters:        counters,
		MaxCost:            maxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true, // memoEntryBytes counts it
	})
	if err != nil {
		// Only a configuration out of range fails, and this one is not.
		panic(err)
	}
	m := &memo{c: c, seed: maphash.MakeSeed()}
	// The cache runs goroutines of its own, which refer to it and not to
	// m: once no set (and no ask in flight) holds m, they are stopped.
	runtime.AddCleanup(m, func(c *ristretto.Cache[uint64, memoEntry]) { c.Close() }, c)
	return m
}

// hash is where key goes in the cache. (A method, not a func field: an
// indirect call would move the caller's key buffer to the heap.)
func (c *memo) hash(key []byte) uint64 {
	if c.collide {
		return 0
	}
	return maphash.Bytes(c.seed, key)
}

// get returns the answer stored under key.
func (c *memo) get(key []byte) (any, bool) {
	e, ok := c.c.Get(c.hash(key))
	// c stays reachable until the cache is done: its cleanup closes the
	// cache, and a closed cache must not be in use.
	runtime.KeepAlive(c)
	if !ok || e.key != string(key) {
		return nil, false
	}
	return e.answer, true
}

// put offers an answer to the cache, which may keep it or not.
func (c *memo) put(key []byte, v any) {
	c.c.Set(c.hash(key), memoEntry{key: string(key), answer: v}, int64(len(key))+memoEntryBytes)
	runtime.KeepAlive(c) // see get
}

// wait returns once the answers put so far are kept or dropped, for tests.
func (c *memo) wait() { c.c.Wait() }
