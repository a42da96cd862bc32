package store

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mappingHeader is the first line of a mapping's block in smaps.
var mappingHeader = regexp.MustCompile(`^[0-9a-f]+-[0-9a-f]+ [-r][-w][-x][sp] `)

// mappedKB is the resident size of the process's mapping of path, from
// /proc/self/smaps.
func mappedKB(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kb, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 5 && mappingHeader.MatchString(line) {
			in = fields[len(fields)-1] == path // an anonymous mapping's header has 5 fields
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			kb += n
		}
	}
	return kb
}

// A checkpoint leaves the bbolt file's pages out of the process's mapping,
// and what reads map again is the file's content.
func TestCheckpointReleasesMappedPages(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	val := strings.Repeat("v", 1000)
	for i := range 4000 {
		mustApply(t, s, put(Runs, fmt.Sprintf("run-%05d", i), val+strconv.Itoa(i)))
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, dbFile)
	readAll := func() {
		t.Helper()
		for i := range 4000 {
			v, err := s.Get(Runs, []byte(fmt.Sprintf("run-%05d", i)))
			if err != nil || string(v) != val+strconv.Itoa(i) {
				t.Fatalf("run %d: %.20q, %v", i, v, err)
			}
		}
	}
	readAll()
	if kb := mappedKB(t, path); kb < 2000 {
		t.Fatalf("reads of 4 MB mapped only %d KiB", kb)
	}
	mustApply(t, s, put(Runs, "one-more", "x"))
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if kb := mappedKB(t, path); kb > 64 {
		t.Fatalf("%d KiB of the file still mapped after a checkpoint", kb)
	}
	readAll()
}
