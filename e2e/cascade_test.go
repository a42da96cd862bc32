package e2e

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haltline/haltline/runstate"
)

// childMarker is in every sub-agent's request: the upstream holds those.
const childMarker = "Sub-task of the report."

func childRequest(stream bool) []byte {
	return []byte(`{"model":"gpt-4o-mini","stream":` + map[bool]string{true: "true", false: "false"}[stream] +
		`,"max_completion_tokens":100,"messages":[{"role":"user","content":"` + childMarker + `"}]}`)
}

var parentRequest = []byte(`{"model":"gpt-4o-mini","max_completion_tokens":100,"messages":[{"role":"user","content":"Summarise the report."}],` +
	`"tools":[{"type":"function","function":{"name":"delegate","parameters":{"type":"object"}}}]}`)

// cancelCascade cancels a parent run while its two sub-agents' calls are
// held by the upstream (until gate closes); parentAt and childAt are the
// data addresses the parent's and the children's calls go to.
func cancelCascade(t *testing.T, parentAt, childAt, parentAdmin, childAdmin string, held *atomic.Int64, gate chan struct{}, crossReplica bool) {
	t.Helper()
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // a failed test lets the held calls go
	// The parent waits on its sub-agents with its tool call outstanding.
	if code, _, b := post(t, "http://"+parentAt+"/v1/chat/completions", parentRequest, map[string]string{"X-Run-Id": "r-parent"}); code != 200 {
		t.Fatalf("parent's call: %d %s", code, b)
	}
	var wg sync.WaitGroup
	ended := make([]string, 2)
	for i, id := range []string{"r-child-1", "r-child-2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, b := post(t, "http://"+childAt+"/v1/chat/completions", childRequest(true),
				map[string]string{"X-Run-Id": id, "X-Parent-Run-Id": "r-parent"})
			ended[i] = string(b)
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for held.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if held.Load() < 2 {
		t.Fatalf("the sub-agents' calls did not reach the upstream")
	}
	code, _, b := post(t, "http://"+parentAdmin+"/api/v1/runs/r-parent/cancel", nil, nil)
	if code != 200 {
		t.Fatalf("cancel: %d %s", code, b)
	}
	if crossReplica {
		// Another replica's call in flight is not cut: it ends when its
		// upstream answers, and its run is ended already.
		release()
	}
	wg.Wait() // both streams ended
	for i, id := range []string{"r-child-1", "r-child-2"} {
		code, _, b := post(t, "http://"+childAt+"/v1/chat/completions", childRequest(false),
			map[string]string{"X-Run-Id": id, "X-Parent-Run-Id": "r-parent"})
		if code != 200 || !strings.Contains(string(b), "parent run r-parent ended: cancelled") {
			t.Fatalf("%s's next call after its parent's cancel (its stream ended with %q): %d %s", id, ended[i], code, b)
		}
		var rec runstate.Record
		getJSON(t, "http://"+childAdmin+"/api/v1/runs/"+id, &rec)
		if rec.Status != runstate.Cancelled || rec.Reason != runstate.ReasonCancelled || !strings.Contains(rec.Detail, "r-parent") {
			t.Fatalf("%s's record: %+v", id, rec)
		}
	}
	var parent runstate.Record
	getJSON(t, "http://"+parentAdmin+"/api/v1/runs/r-parent", &parent)
	if parent.Status != runstate.Cancelled || len(parent.ChildRunIDs) != 2 {
		t.Fatalf("parent's record: %+v", parent)
	}
	release()
	if n := held.Load(); n != 2 {
		t.Fatalf("the upstream saw %d sub-agent calls, want the 2 cut", n)
	}
}

// holdingChildren is an upstream that holds each sub-agent's call until
// gate closes, and answers the rest at once.
func holdingChildren(t *testing.T) (*upstream, *atomic.Int64, chan struct{}) {
	m := &toolLoop{finalAfter: 1, in: 20, out: 5}
	gate := make(chan struct{})
	held := &atomic.Int64{}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.Contains(string(body), childMarker) {
			held.Add(1)
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		m.serve(w, r, body)
	})
	return up, held, gate
}

// Cancelling a parent run ends its two sub-agents mid-flight: their held
// streams are cut, their next calls answer with the termination naming
// the parent, and the parent's record lists them.
func TestCancelParentEndsSubAgents(t *testing.T) {
	t.Parallel()
	up, held, gate := holdingChildren(t)
	g := startGateway(t, up.URL)
	cancelCascade(t, g.DataAddr, g.DataAddr, g.AdminAddr, g.AdminAddr, held, gate, false)
}

// The same across two replicas on one Redis: the parent is cancelled on
// one, its sub-agents run on the other.
func TestRedisCancelParentEndsSubAgentsOnAnotherReplica(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	rd := startRedis(t)
	up, held, gate := holdingChildren(t)
	cfg := replicaConfig(t, rd.url(), `{}`)
	a := startReplica(t, bin, up.URL, cfg)
	b := startReplica(t, bin, up.URL, cfg)
	waitReady(t, a)
	waitReady(t, b)
	cancelCascade(t, a.data, b.data, a.admin, b.admin, held, gate, true)
}

// A parent that ends by its step budget ends its sub-agent: the sub-agent's
// next call answers with the termination naming the parent.
func TestParentEndedByBudgetEndsSubAgent(t *testing.T) {
	t.Parallel()
	m := &toolLoop{finalAfter: 0, in: 20, out: 5}
	up := newUpstream(t, m.serve)
	g := startGateway(t, up.URL)
	url := "http://" + g.DataAddr + "/v1/chat/completions"
	parent := map[string]string{"X-Run-Id": "r-parent", "X-Run-Budget": "max_steps=3"}
	child := map[string]string{"X-Run-Id": "r-child", "X-Parent-Run-Id": "r-parent"}
	for _, h := range []map[string]string{parent, child, parent} {
		if code, _, b := post(t, url, fixedRequest(100), h); code != 200 {
			t.Fatalf("%v: %d %s", h, code, b)
		}
	}
	if rec := runRecord(t, g, "r-parent"); rec.Reason != runstate.ReasonMaxSteps || len(rec.ChildRunIDs) != 1 {
		t.Fatalf("parent's record: %+v", rec)
	}
	calls := len(up.requests())
	code, _, b := post(t, url, fixedRequest(100), child)
	if code != 200 || !strings.Contains(string(b), "parent run r-parent ended: max_steps") {
		t.Fatalf("sub-agent's call after its parent ended: %d %s", code, b)
	}
	if n := len(up.requests()); n != calls {
		t.Fatalf("the sub-agent's call reached the upstream")
	}
	if rec := runRecord(t, g, "r-child"); rec.Status != runstate.Cancelled || !strings.Contains(rec.Detail, "r-parent") {
		t.Fatalf("sub-agent's record: %+v", rec)
	}
}
