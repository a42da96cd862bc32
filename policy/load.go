package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	haltrego "github.com/haltline/haltline/rego"
)

// dataFile is the one data file a policy directory may hold (docs/design.md §11).
const dataFile = "data.json"

// source is one parsed Rego file of the merged set.
type source struct {
	name   string // shown in errors: "embedded/budget.rego" or the file's path
	module *ast.Module
	pkg    string // package path without "data.", e.g. "haltline.budget"
	// owner is the package a test file tests ("haltline.budget" for
	// "haltline.budget_test"); for a policy file it is pkg itself.
	owner string
	test  bool
}

// files is what one origin (the embedded FS or a directory) provides.
type files struct {
	sources []source
	data    map[string]any // the whole data document, e.g. {"haltline": {…}}
}

var parserOptions = ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true}

// loadFS parses the *.rego files and data.json at the root of fsys. prefix
// is prepended to file names in errors.
func loadFS(fsys fs.FS, prefix string) (files, error) {
	var out files
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return out, fmt.Errorf("policy: read %s: %w", prefix, err)
	}
	var errs []error
	for _, ent := range entries {
		name := ent.Name()
		if strings.HasPrefix(name, ".") || (!strings.HasSuffix(name, ".rego") && name != dataFile) {
			continue
		}
		shown := path.Join(prefix, name)
		// ReadFile follows symlinks, as in a Kubernetes ConfigMap mount.
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			if isDirErr(fsys, name) {
				continue
			}
			errs = append(errs, fmt.Errorf("policy: read %s: %w", shown, err))
			continue
		}
		if name == dataFile {
			d, err := parseData(shown, b)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out.data = d
			continue
		}
		src, err := parseSource(shown, name, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.sources = append(out.sources, src)
	}
	return out, errors.Join(errs...)
}

func isDirErr(fsys fs.FS, name string) bool {
	st, err := fs.Stat(fsys, name)
	return err == nil && st.IsDir()
}

func parseSource(shown, base string, b []byte) (source, error) {
	m, err := ast.ParseModuleWithOpts(shown, string(b), parserOptions)
	if err != nil {
		// OPA's parse errors already read "file:line: rego_parse_error: …".
		return source{}, fmt.Errorf("policy: %w", err)
	}
	if m == nil {
		return source{}, fmt.Errorf("policy: %s: empty module", shown)
	}
	pkg := strings.TrimPrefix(m.Package.Path.String(), "data.")
	src := source{name: shown, module: m, pkg: pkg, owner: pkg}
	if strings.HasSuffix(pkg, "_test") {
		src.owner = strings.TrimSuffix(pkg, "_test")
		src.test = true
	}
	if strings.HasSuffix(base, "_test.rego") {
		src.test = true
	}
	return src, nil
}

func parseData(shown string, b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keeps integers exact until OPA converts them
	var d map[string]any
	if err := dec.Decode(&d); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			return nil, fmt.Errorf("policy: %s:%d: %w", shown, line, err)
		}
		return nil, fmt.Errorf("policy: %s: %w", shown, err)
	}
	if d == nil {
		return nil, fmt.Errorf("policy: %s: want a JSON object", shown)
	}
	if h, ok := d["haltline"]; ok {
		if _, ok := h.(map[string]any); !ok {
			return nil, fmt.Errorf("policy: %s: \"haltline\" must be an object", shown)
		}
	}
	return d, nil
}

// loadEmbedded parses the defaults of package rego.
func loadEmbedded() (files, error) {
	return loadFS(haltrego.FS, "embedded")
}

// loadDir parses a policy directory; an empty dir means none.
func loadDir(dir string) (files, error) {
	if dir == "" {
		return files{}, nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return files{}, fmt.Errorf("policy: policy dir: %w", err)
	}
	if !st.IsDir() {
		return files{}, fmt.Errorf("policy: policy dir %s is not a directory", dir)
	}
	return loadFS(os.DirFS(dir), filepath.ToSlash(filepath.Clean(dir)))
}

// merge applies docs/design.md §11: a package the directory defines replaces the
// embedded files of that package (and the embedded tests of it, which test
// the replaced rules); a test package the directory defines replaces the
// embedded one; everything else is kept. Data is deep-merged in order:
// embedded, extra (the caller's, e.g. the config's tool registry, under
// "haltline"), then the directory's, so policy has the last word.
func merge(emb, dir files, extra map[string]any) ([]source, map[string]any) {
	ownedByDir := map[string]bool{}
	testPkgInDir := map[string]bool{}
	for _, s := range dir.sources {
		if s.test {
			testPkgInDir[s.pkg] = true
		} else {
			ownedByDir[s.pkg] = true
		}
	}
	var out []source
	for _, s := range emb.sources {
		if ownedByDir[s.owner] || (s.test && testPkgInDir[s.pkg]) {
			continue
		}
		out = append(out, s)
	}
	out = append(out, dir.sources...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })

	data := map[string]any{}
	deepMerge(data, emb.data)
	if extra != nil {
		deepMerge(data, map[string]any{"haltline": extra})
	}
	deepMerge(data, dir.data)
	return out, data
}

// deepMerge merges src into dst: objects recursively, anything else
// replaced. Values of src are copied so dst never aliases the caller's maps.
func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			dv, ok := dst[k].(map[string]any)
			if !ok {
				dv = map[string]any{}
				dst[k] = dv
			}
			deepMerge(dv, sv)
			continue
		}
		dst[k] = copyJSON(v)
	}
}

func copyJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		deepMerge(m, x)
		return m
	case []any:
		return slices.Clone(x)
	default:
		return v
	}
}

// modulesOf keys the sources by name for the compiler; withTests adds the
// test files, which the engine itself never compiles.
func modulesOf(srcs []source, withTests bool) map[string]*ast.Module {
	mods := make(map[string]*ast.Module, len(srcs))
	for _, s := range srcs {
		if s.test && !withTests {
			continue
		}
		mods[s.name] = s.module
	}
	return mods
}

// capabilities are OPA's minus the builtins that reach the network, so no
// policy can do I/O while a call waits on it.
func capabilities() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	c.Builtins = slices.DeleteFunc(slices.Clone(c.Builtins), func(b *ast.Builtin) bool {
		switch b.Name {
		case "http.send", "net.lookup_ip_addr", "opa.runtime":
			return true
		}
		return false
	})
	return c
}

func newCompiler() *ast.Compiler {
	return ast.NewCompiler().
		WithCapabilities(capabilities()).
		WithDefaultRegoVersion(ast.RegoV1)
}

func compile(mods map[string]*ast.Module) (*ast.Compiler, error) {
	c := newCompiler()
	if c.Compile(mods); c.Failed() {
		// Each error reads "file:line: rego_…_error: …".
		return nil, fmt.Errorf("policy: compile: %w", c.Errors)
	}
	return c, nil
}

// loadAll reads and merges the embedded defaults, extra data and dir.
func loadAll(dir string, extra map[string]any) ([]source, map[string]any, error) {
	emb, err := loadEmbedded()
	if err != nil {
		return nil, nil, err
	}
	d, err := loadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	srcs, data := merge(emb, d, extra)
	return srcs, data, nil
}

// checkCollisions refuses data at the path of a loaded package (e.g.
// {"haltline": {"loop": …}} next to package haltline.loop): OPA would mix
// the two documents and the policy would read its own rules as data. Data
// keys are plural (budgets, models, tools, loops, terminations) for this
// reason.
func checkCollisions(srcs []source, data map[string]any) error {
	seen := map[string]bool{}
	for _, s := range srcs {
		if s.test || seen[s.pkg] {
			continue
		}
		seen[s.pkg] = true
		var cur any = data
		for _, seg := range strings.Split(s.pkg, ".") {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = m[seg]
		}
		if cur != nil {
			return fmt.Errorf("policy: data.%s is set in data, but it is the document of package %s (%s); data keys for it are plural, e.g. data.%ss", s.pkg, s.pkg, s.name, s.pkg)
		}
	}
	return nil
}
