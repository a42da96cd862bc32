package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
)

const benchResponse = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020}}`

func benchBody() []byte {
	return []byte(`{"model":"gpt-4o-mini","max_completion_tokens":500,"messages":[{"role":"user","content":"` +
		strings.Repeat("lorem ipsum ", 160) + `"}]}`)
}

// benchPersistence measures one governed model call (Begin + Finish, no
// network to the model) with the given book and store, from several
// goroutines: what persistence costs per call.
func benchPersistence(b *testing.B, book accounting.Book, st store.Store, lock pipeline.RunLock) {
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: lock})
	body, resp := benchBody(), []byte(benchResponse)
	ctx := context.Background()
	prefix := fmt.Sprintf("r%d-", time.Now().UnixNano())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			// 50 steps per run, under the default limit of 100 steps.
			t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: fmt.Sprintf("%s%d-%p", prefix, i/50, pb)}, openai.Chat{})
			if t.Answer != nil {
				b.Errorf("refused: %s", t.Answer.Body)
				return
			}
			p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
		}
	})
}

// BenchmarkPersistencePerCall compares the cost of persistence per call:
// memory only, the embedded bbolt store, and Redis (shared book, store and
// run locks, as several replicas run).
func BenchmarkPersistencePerCall(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchPersistence(b, nil, nil, nil) })
	b.Run("bbolt", func(b *testing.B) {
		st, err := store.OpenBolt(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchPersistence(b, nil, st, nil)
	})
	b.Run("redis", func(b *testing.B) {
		book, st, err := Open(redisURL, fmt.Sprintf("bench%d:", time.Now().UnixNano()))
		if err != nil {
			b.Fatal(err)
		}
		defer book.Close()
		defer st.Close()
		benchPersistence(b, book, st, st)
	})
}

// BenchmarkRestoreFromRedis is a replica's restart on a Redis store that
// holds 4,000 unfinished runs: it reads them through the store's list of
// unfinished runs, a round trip a batch of store.GetManyBatch snapshots.
func BenchmarkRestoreFromRedis(b *testing.B) {
	const runs = 4000
	book, st, err := Open(redisURL, fmt.Sprintf("bench%d:", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	defer book.Close()
	defer st.Close()
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	opts := pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: st}
	p := pipeline.New(opts)
	ctx := context.Background()
	body := benchBody()
	resp := []byte(strings.Replace(benchResponse, `"content":"Done."},"finish_reason":"stop"`,
		`"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"`, 1))
	for i := range runs {
		t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: fmt.Sprintf("r-%05d", i)}, openai.Chat{})
		if t.Answer != nil {
			b.Fatalf("refused: %s", t.Answer.Body)
		}
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
	}
	if n, err := pipeline.New(opts).Restore(ctx); n != runs || err != nil { // the first completes the list
		b.Fatalf("first restart: %d runs, %v", n, err)
	}
	b.ResetTimer()
	for range b.N {
		if n, err := pipeline.New(opts).Restore(ctx); n != runs || err != nil {
			b.Fatalf("restart: %d runs, %v", n, err)
		}
	}
}
