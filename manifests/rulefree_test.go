package manifests

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/injector"
)

// A Deployment as public manifests carry it: `selector` given twice, which
// the API server accepts (the last wins), and no restart rules.
const duplicateSelector = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
  selector:   # repeated, as in the wild
    matchLabels: {app: web}
`

// ruled is a pod with rules, which inject wraps.
const ruled = `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: app
    image: registry.test/app:1
    command: [/app]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]
`

func injectStream(t *testing.T, in string) (string, []*Document) {
	t.Helper()
	inj := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:t"})
	var out bytes.Buffer
	var docs []*Document
	err := InjectStream(context.Background(), inj, strings.NewReader(in), &out, func(d *Document, _ []ObjectReport) {
		docs = append(docs, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), docs
}

// TestRuleFreeDocumentsPassThrough: through the stream inject runs, a
// document without rules comes out byte for byte whatever it holds, and
// one with rules is still refused for the same defects.
func TestRuleFreeDocumentsPassThrough(t *testing.T) {
	anchors := "a: &a [" + strings.Repeat("x,", 1000) + "]\nb: &b [" + strings.Repeat("*a,", 1100) + "]\nc: [" + strings.Repeat("*b,", 1000) + "]\n"
	for name, doc := range map[string]string{
		"duplicate selector":                      duplicateSelector,
		"duplicate in a list":                     "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: s}, metadata: {name: s}}\n",
		"aliases past the budget":                 anchors,
		"wrong types":                             "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {template: {spec: {containers: 5}}}\n",
		"pod restartPolicy under a key, repeated": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      restartPolicy: Never\n      containers: [{name: a, image: b}]\n",
		"JSON with wrong types":                   `{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": {"a": 1}}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			in := ruled + "---\n" + doc
			out, docs := injectStream(t, in)
			if len(docs) != 2 {
				t.Fatalf("%d documents", len(docs))
			}
			for _, d := range docs {
				if d.Err != nil {
					t.Errorf("line %d: %v", d.Line, d.Err)
				}
			}
			if !strings.HasSuffix(out, "---\n"+doc) {
				t.Errorf("the document without rules changed:\n%s", out[strings.Index(out, "---\n"):])
			}
			if !strings.Contains(out, "restart-supervisor.dev/status") {
				t.Error("the pod with rules was not injected")
			}
		})
	}

	// The same defects in a document that carries rules (or anything of
	// the injector's) are refused: which of two values was meant is not
	// guessed.
	for name, tc := range map[string]struct{ doc, want string }{
		"rules and a duplicate": {strings.Replace(ruled, "metadata: {name: p}", "metadata: {name: p}\nmetadata: {name: q}", 1),
			`document at line 1: line 4: mapping key "metadata" already defined at line 3`},
		"container restartPolicy and a duplicate": {"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: b, restartPolicy: Never}]\n",
			`document at line 1: line 4: mapping key "metadata" already defined at line 3`},
		"anchored mapping with restartPolicy": {"apiVersion: v1\nkind: Pod\nx: &c {name: a, image: b, restartPolicy: Never}\nx: 1\n",
			`document at line 1: line 4: mapping key "x" already defined at line 3`},
		"the rules annotation and a duplicate": {"apiVersion: v1\nkind: Pod\nmetadata: {annotations: {restart-supervisor.dev/rules: 'a: {}'}}\nspec: {}\nspec: {}\n",
			`document at line 1: line 5: mapping key "spec" already defined at line 4`},
	} {
		t.Run(name, func(t *testing.T) {
			_, docs := injectStream(t, tc.doc)
			if len(docs) != 1 || docs[0].Err == nil || docs[0].Err.Error() != tc.want {
				t.Errorf("error %v, want %s", docs[0].Err, tc.want)
			}
		})
	}
}

// TestRuleFreeDuplicateKeysCostTheirSize: a rule-free document of 60 000
// repeated keys (yaml.v3's decoder would compare 1.8e9 pairs and keep a
// message for each) is read in what its text costs.
func TestRuleFreeDuplicateKeysCostTheirSize(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n")
	for range 60000 {
		b.WriteString("  k: v\n")
	}
	doc := b.String()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out, docs := injectStream(t, doc)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes: %d MiB allocated", len(doc), alloc>>20)
	if docs[0].Err != nil || out != doc {
		t.Fatalf("err %v, output changed: %v", docs[0].Err, out != doc)
	}
	if alloc > uint64(200*len(doc)) {
		t.Errorf("allocated %d MiB for %d bytes", alloc>>20, len(doc))
	}
}

// TestRuleFreeJSONStream: the same in a JSON stream, decoded by the JSON
// reader.
func TestRuleFreeJSONStream(t *testing.T) {
	in := `{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": {"a": 1}}}}}` + "\n"
	out, docs := injectStream(t, in)
	if docs[0].Err != nil || out != in {
		t.Errorf("err %v, output %q", docs[0].Err, out)
	}
	in = `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "restartPolicy": "Never", "image": 5}]}}` + "\n"
	if _, docs = injectStream(t, in); docs[0].Err == nil {
		t.Error("a JSON pod with a container restartPolicy and a wrong type was not refused")
	}
}
