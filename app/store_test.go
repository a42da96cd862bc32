package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/store"
)

func storeCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Main(t.Context(), append([]string{"store"}, args...), &out, &errOut, func(string) string { return "" })
	return out.String() + errOut.String(), err
}

func TestStoreHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"-h"}, {"--help"}, {"check", "-h"}} {
		out, err := storeCLI(t, args...)
		if err != nil || !strings.Contains(out, "gateway store repair") {
			t.Fatalf("store %v: %v\n%s", args, err, out)
		}
	}
	if _, err := storeCLI(t, "mend"); err == nil {
		t.Fatal("an unknown store command succeeded")
	}
}

// crashedStore leaves in a directory what a process killed after three
// commits leaves: the bbolt file and a log of three records.
func crashedStore(t *testing.T) (dir, segment string) {
	t.Helper()
	live := t.TempDir()
	st, err := store.OpenBoltWith(live, store.BoltOptions{CheckpointEvery: time.Hour, SyncEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, k := range []string{"r-1", "r-2", "r-3"} {
		if err := <-st.Apply([]store.Op{{Bucket: store.Runs, Key: []byte(k), Value: []byte("run")}}); err != nil {
			t.Fatal(err)
		}
	}
	dir = t.TempDir()
	files, _ := filepath.Glob(filepath.Join(live, "*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".log") {
			segment = filepath.Base(f)
		}
	}
	return dir, segment
}

// Damage in the middle of the log: check says where and fails, the
// gateway does not start and names the repair, repair keeps the records
// before the damage, and then check passes and the gateway starts.
func TestStoreCheckAndRepair(t *testing.T) {
	dir, seg := crashedStore(t)
	if out, err := storeCLI(t, "check", "--data-dir", dir); err != nil || !strings.Contains(out, "the store opens") {
		t.Fatalf("check of a whole store: %v\n%s", err, out)
	}
	path := filepath.Join(dir, seg)
	data, _ := os.ReadFile(path)
	data[10] ^= 0xff // the first record's payload: two whole ones follow
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := storeCLI(t, "check", "--data-dir", dir)
	if err == nil || !strings.Contains(out, seg+": damaged at offset 0") {
		t.Fatalf("check of a damaged store: %v\n%s", err, out)
	}
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = dir
	if g, err := Start(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "gateway store repair --data-dir "+dir) {
		if g != nil {
			_ = g.Close(context.Background())
		}
		t.Fatalf("the gateway over a damaged log: %v", err)
	}

	out, err = storeCLI(t, "repair", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "kept 0 whole records") || !strings.Contains(out, "the store opens") {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	if backups, _ := filepath.Glob(path + ".damaged-*"); len(backups) != 1 {
		t.Fatalf("the damaged segment was not kept aside: %v", backups)
	}
	g, err := Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
