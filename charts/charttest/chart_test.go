package charttest

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/haltline/haltline/config"
)

var update = flag.Bool("update", false, "rewrite the golden manifests")

// root is the repository root, from this package's directory.
const root = "../.."

// separator splits a golden file: values above, rendered manifests below.
const separator = "#---- rendered ----\n"

// kubeVersion pins the cluster version the goldens are rendered for (native
// sidecars and the preStop sleep action depend on it).
const kubeVersion = "1.31.0"

// helm runs the pinned Helm (tools/go.mod) from the repository root.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "-modfile=tools/go.mod", "helm.sh/helm/v3/cmd/helm"}, args...)...)
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// golden reads a golden file's values part into a temporary values file.
func golden(t *testing.T, name string) (valuesFile string, input, rendered string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".golden"))
	if err != nil {
		t.Fatal(err)
	}
	in, out, ok := strings.Cut(string(b), separator)
	if !ok {
		t.Fatalf("%s.golden lacks the separator %q", name, separator)
	}
	valuesFile = filepath.Join(t.TempDir(), name+"-values.yaml")
	if err := os.WriteFile(valuesFile, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	return valuesFile, in, out
}

func render(t *testing.T, valuesFile string, extra ...string) string {
	t.Helper()
	args := append([]string{"template", "hl", "charts/haltline", "--namespace", "agents", "--kube-version", kubeVersion, "-f", valuesFile}, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	return out
}

var modes = []string{"standalone", "sidecar"}

func TestLint(t *testing.T) {
	t.Parallel()
	for _, desc := range append([]string{"defaults"}, modes...) {
		t.Run(desc, func(t *testing.T) {
			t.Parallel()
			args := []string{"lint", "--strict", "charts/haltline"}
			if desc != "defaults" {
				vf, _, _ := golden(t, desc)
				args = append(args, "-f", vf)
			}
			out, err := helm(t, args...)
			if err != nil || !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// The rendered manifests of both modes are the goldens (go test -update
// rewrites them).
func TestGoldens(t *testing.T) {
	t.Parallel()
	for _, desc := range modes {
		t.Run(desc, func(t *testing.T) {
			t.Parallel()
			vf, in, want := golden(t, desc)
			got := render(t, vf)
			if *update {
				if err := os.WriteFile(filepath.Join("testdata", desc+".golden"), []byte(in+separator+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Fatalf("rendered manifests differ from testdata/%s.golden (go test -update to accept):\n%s", desc, diff(want, got))
			}
		})
	}
}

// diff shows the first differing lines.
func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return ""
}

// object is one rendered manifest.
type object map[string]any

func objects(t *testing.T, manifests string) map[string]object {
	t.Helper()
	out := map[string]object{}
	dec := yaml.NewDecoder(strings.NewReader(manifests))
	for {
		// Plain maps: yaml.v3 would give nested maps the named type.
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered manifests: %v", err)
		}
		if m == nil {
			continue
		}
		o := object(m)
		out[o.str("kind")+"/"+o.str("metadata", "name")] = o
	}
	return out
}

// get walks maps by key and lists by index ("0", "1", …).
func (o object) get(path ...string) any {
	var v any = map[string]any(o)
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i := 0
			for _, c := range p {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func (o object) str(path ...string) string {
	s, _ := o.get(path...).(string)
	if s == "" && o.get(path...) != nil {
		b, _ := yaml.Marshal(o.get(path...))
		return strings.TrimSpace(string(b))
	}
	return s
}

// containerNamed finds a container in a pod spec list (containers or
// initContainers).
func containerNamed(dep object, list, name string) object {
	cs, _ := dep.get("spec", "template", "spec", list).([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			return object(m)
		}
	}
	return nil
}

// gatewayConfig parses the rendered gateway.yaml with the gateway's own
// parser, which rejects unknown keys.
func gatewayConfig(t *testing.T, objs map[string]object) config.Config {
	t.Helper()
	cm := objs["ConfigMap/hl-haltline-config"]
	if cm == nil {
		t.Fatal("no config ConfigMap")
	}
	cfg := config.Default()
	if err := cfg.Parse([]byte(cm.str("data", "gateway.yaml"))); err != nil {
		t.Fatalf("rendered gateway.yaml: %v\n%s", err, cm.str("data", "gateway.yaml"))
	}
	return cfg
}

func TestRenderedObjects(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		vf, _, _ := golden(t, "standalone")
		objs := objects(t, render(t, vf))
		for _, k := range []string{"Deployment/hl-haltline", "Service/hl-haltline", "ServiceAccount/hl-haltline",
			"ConfigMap/hl-haltline-policies", "ConfigMap/hl-haltline-prices", "ServiceMonitor/hl-haltline",
			"HorizontalPodAutoscaler/hl-haltline", "PodDisruptionBudget/hl-haltline"} {
			if objs[k] == nil {
				t.Errorf("%s not rendered (have %v)", k, keys(objs))
			}
		}
		dep := objs["Deployment/hl-haltline"]
		if dep == nil {
			t.FailNow()
		}
		if dep.get("spec", "replicas") != nil {
			t.Error("replicas set although the HPA owns them")
		}
		gw := containerNamed(dep, "containers", "haltline")
		checkGateway(t, dep, gw)
		for i, want := range []string{"OPENAI_API_KEY=provider-keys/OPENAI_API_KEY", "ANTHROPIC_API_KEY=provider-keys/ANTHROPIC_API_KEY", "HALTLINE_ADMIN_TOKEN=haltline-admin/token"} {
			found := false
			for j := range 3 {
				e := object(asMap(gw.get("env", strconv.Itoa(j))))
				if e.str("name")+"="+e.str("valueFrom", "secretKeyRef", "name")+"/"+e.str("valueFrom", "secretKeyRef", "key") == want {
					found = true
				}
			}
			if !found {
				t.Errorf("env %d: %s not taken from its Secret: %v", i, want, gw.get("env"))
			}
		}
		svc := objs["Service/hl-haltline"]
		if got := svc.str("spec", "ports", "2", "name") + ":" + svc.str("spec", "ports", "2", "port"); got != "extproc:9000" {
			t.Errorf("service extproc port %q", got)
		}
		cfg := gatewayConfig(t, objs)
		for _, c := range []struct{ desc, got, want string }{
			{"listen", cfg.Listen, "0.0.0.0:8080"},
			{"admin listen", cfg.Admin.Listen, "0.0.0.0:9090"},
			{"extproc listen", cfg.ExtProcListen, "0.0.0.0:9000"},
			{"admin token env", cfg.Admin.TokenEnv, "HALTLINE_ADMIN_TOKEN"},
			{"openai key env", cfg.Providers.OpenAI.APIKeyEnv, "OPENAI_API_KEY"},
			{"redis", cfg.Store.RedisURL, "redis://redis.haltline.svc:6379/0"},
			{"policy dir", cfg.PolicyDir, "/etc/haltline/rego"},
			{"prices", cfg.Prices, "/etc/haltline/prices/prices.yaml"},
			{"virtual key tenant", cfg.VirtualKeys["sk-red-1"].Tenant, "acme"},
		} {
			if c.got != c.want {
				t.Errorf("gateway.yaml %s = %q, want %q", c.desc, c.got, c.want)
			}
		}
	})
	t.Run("sidecar", func(t *testing.T) {
		t.Parallel()
		vf, _, _ := golden(t, "sidecar")
		objs := objects(t, render(t, vf))
		if objs["Service/hl-haltline"] != nil || objs["HorizontalPodAutoscaler/hl-haltline"] != nil {
			t.Error("sidecar mode renders standalone objects")
		}
		dep := objs["Deployment/hl-haltline"]
		gw := containerNamed(dep, "initContainers", "haltline")
		if gw == nil {
			t.Fatal("the gateway is not a native sidecar (init container)")
		}
		if gw.str("restartPolicy") != "Always" {
			t.Errorf("native sidecar restartPolicy %q", gw.str("restartPolicy"))
		}
		checkGateway(t, dep, gw)
		agent := containerNamed(dep, "containers", "research-agent")
		if agent == nil {
			t.Fatal("agent container missing")
		}
		if e := object(asMap(agent.get("env", "0"))); e.str("name") != "OPENAI_BASE_URL" || e.str("value") != "http://127.0.0.1:8080/v1" {
			t.Errorf("agent not pointed at the gateway: %v", agent.get("env"))
		}
		cfg := gatewayConfig(t, objs)
		if cfg.Listen != "127.0.0.1:8080" || cfg.Store.DataDir != "/var/lib/haltline" || cfg.PolicyDir != "" || cfg.Prices != "" {
			t.Errorf("gateway.yaml %+v", cfg)
		}
	})
	t.Run("sidecar before native sidecars", func(t *testing.T) {
		t.Parallel()
		vf, _, _ := golden(t, "sidecar")
		objs := objects(t, render(t, vf, "--kube-version", "1.28.0"))
		dep := objs["Deployment/hl-haltline"]
		gw := containerNamed(dep, "containers", "haltline")
		if gw == nil || containerNamed(dep, "initContainers", "haltline") != nil {
			t.Fatal("on Kubernetes 1.28 the gateway must be a plain second container")
		}
		if gw.get("lifecycle") != nil {
			t.Error("preStop sleep action rendered for a cluster without it")
		}
	})
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

// checkGateway checks what every gateway container must have: probes,
// non-root, read-only root filesystem, drain on stop.
func checkGateway(t *testing.T, dep, gw object) {
	t.Helper()
	if gw == nil {
		t.Fatal("gateway container missing")
	}
	for _, c := range []struct{ desc, got, want string }{
		{"liveness path", gw.str("livenessProbe", "httpGet", "path"), "/healthz"},
		{"readiness path", gw.str("readinessProbe", "httpGet", "path"), "/readyz"},
		{"probe port", gw.str("readinessProbe", "httpGet", "port"), "admin"},
		{"read-only root", gw.str("securityContext", "readOnlyRootFilesystem"), "true"},
		{"no privilege escalation", gw.str("securityContext", "allowPrivilegeEscalation"), "false"},
		{"non-root pod", dep.str("spec", "template", "spec", "securityContext", "runAsNonRoot"), "true"},
		{"preStop sleep", gw.str("lifecycle", "preStop", "sleep", "seconds"), "5"},
		{"config mount", gw.str("volumeMounts", "0", "mountPath"), "/etc/haltline/config"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.desc, c.got, c.want)
		}
	}
}

// values.schema.json (and the chart's own guards) refuse wrong values
// before anything is rendered.
func TestSchemaRejectsWrongValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc, values, want string
	}{
		{desc: "unknown mode", values: "mode: daemonset\n", want: "mode"},
		{desc: "replicas as a string", values: "replicaCount: two\n", want: "replicaCount"},
		{desc: "misspelled key", values: "replicas: 2\n", want: "replicas"},
		{desc: "chart-owned key in config", values: "config: {listen: 0.0.0.0:1}\n", want: "config"},
		{desc: "redis URL without scheme", values: "store: {redisUrl: 'redis-host:6379'}\nreplicaCount: 2\n", want: "redisUrl"},
		{desc: "writable root filesystem", values: "securityContext: {readOnlyRootFilesystem: false}\n", want: "readOnlyRootFilesystem"},
		{desc: "port out of range", values: "ports: {http: 70000, admin: 9090, extproc: 9000}\n", want: "http"},
		{desc: "several replicas without Redis", values: "replicaCount: 3\n", want: "needs store.redisUrl"},
		{desc: "sidecar without an agent", values: "mode: sidecar\n", want: "sidecar.agent.image"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			vf := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(vf, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := helm(t, "template", "hl", "charts/haltline", "-f", vf)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.values)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("refused, but not for %q:\n%s", tc.want, out)
			}
		})
	}
}

func keys(m map[string]object) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
