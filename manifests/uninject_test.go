package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	textyaml "go.yaml.in/yaml/v3"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

func uninjectBytes(t testing.TB, in []byte) ([]byte, []ObjectReport, error) {
	t.Helper()
	m, err := ReadManifests(in)
	if err != nil {
		t.Fatalf("ReadManifests: %v", err)
	}
	reports, uerr := UninjectManifests(m)
	var out bytes.Buffer
	if _, err := m.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), reports, uerr
}

// normalised is each document of a stream as the writer renders it when
// it changes it: YAML through the node tree (2-space indentation), JSON
// indented with 2 spaces. A document in that form comes back from
// inject and uninject byte for byte.
func normalised(t *testing.T, in []byte) [][]byte {
	m, err := ReadManifests(in)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range m.Docs {
		if d.Object == nil {
			out = append(out, d.Raw)
			continue
		}
		var b []byte
		if d.format == FormatJSON {
			b, err = patchJSON(d.Raw, nil)
		} else {
			b, err = patchYAML(d.Raw, d.node, nil, nil)
			if err == nil && len(d.Raw) > 0 && d.Raw[len(d.Raw)-1] != '\n' {
				b = bytes.TrimSuffix(b, []byte("\n"))
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestUninjectGolden: inject, then uninject, gives back every document of
// every golden input: the documents inject left alone byte for byte, the
// injected ones as the writer renders the original (which, for the inputs
// already in that form, is the original byte for byte). Uninjecting what
// was never injected changes nothing.
//
// Both deliveries: the undo record of an image-volume injection (no
// install container, the image as the binary volume) is followed back as
// the copy's is.
func TestUninjectGolden(t *testing.T) {
	for _, d := range []injector.Delivery{injector.DeliveryCopy, injector.DeliveryImage} {
		t.Run(string(d), func(t *testing.T) { uninjectGolden(t, d) })
	}
}

func uninjectGolden(t *testing.T, d injector.Delivery) {
	inj, _ := goldenInjector(t)
	inj = inj.With(injector.Call{Delivery: d})
	ctx := context.Background()
	exact := 0
	var normalisedOnly []string
	for _, in := range goldenInputs(t) {
		t.Run(filepath.Base(in), func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			injected, _ := injectBytesCtx(ctx, t, inj, src)
			if d == injector.DeliveryImage && bytes.Contains(injected, []byte(contract.InstallContainer)) && !bytes.Contains(src, []byte(contract.InstallContainer)) {
				t.Fatalf("the image delivery wrote the install container:\n%s", injected)
			}
			back, _, err := uninjectBytes(t, injected)
			if err != nil {
				t.Fatalf("uninject: %v", err)
			}
			orig, err := ReadManifests(src)
			if err != nil {
				t.Fatal(err)
			}
			im, _ := ReadManifests(injected)
			bm, _ := ReadManifests(back)
			if len(bm.Docs) != len(orig.Docs) || len(im.Docs) != len(orig.Docs) {
				t.Fatalf("%d documents back, %d in", len(bm.Docs), len(orig.Docs))
			}
			norm := normalised(t, src)
			for k := range orig.Docs {
				o, i, b := orig.Docs[k], im.Docs[k], bm.Docs[k]
				if !bytes.Equal(b.Sep, o.Sep) {
					t.Errorf("document %d: separator %q, want %q", k, b.Sep, o.Sep)
				}
				switch {
				case bytes.Equal(b.Raw, o.Raw):
					if !bytes.Equal(i.Raw, o.Raw) {
						exact++
					}
				case bytes.Equal(b.Raw, norm[k]) && !bytes.Equal(i.Raw, o.Raw):
					normalisedOnly = append(normalisedOnly, filepath.Base(in)+":"+strconv.Itoa(o.Line))
				case bytes.Equal(i.Raw, o.Raw):
					t.Errorf("document %d (line %d) was not injected, but uninject changed it:\n%s", k, o.Line, lineDiff(string(o.Raw), string(b.Raw)))
				case !bytes.Equal(b.Raw, norm[k]):
					t.Errorf("document %d (line %d) does not come back:\n%s", k, o.Line, lineDiff(string(norm[k]), string(b.Raw)))
				}
			}
			again, _, err := uninjectBytes(t, back)
			if err != nil || !bytes.Equal(again, back) {
				t.Errorf("uninjecting the original changed it (%v):\n%s", err, lineDiff(string(back), string(again)))
			}
		})
	}
	if exact == 0 {
		t.Errorf("no injected document came back byte for byte")
	}
	t.Logf("%d injected documents came back byte for byte, %d as the writer renders them: %v", exact, len(normalisedOnly), normalisedOnly)
}

const uninjectDeploy = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: shop
spec:
  replicas: 3
  template:
    spec:
      containers:
      - name: api
        image: registry.test/app:1
        command: ["/api"] # the server
        restartPolicy: Never
        restartPolicyRules:
        - action: Restart
          exitCodes: {operator: In, values: [42]}
        env:
        - {name: MODE, value: prod}
`

// TestUninjectEdits: edits outside the wrap are kept; an edit of the wrap
// itself is refused with one line naming the object and the field, and
// the document is written back as it is.
func TestUninjectEdits(t *testing.T) {
	inj, _ := goldenInjector(t)
	injected, _ := injectBytes(t, inj, []byte(uninjectDeploy))
	in := string(injected)

	out, reports, err := uninjectBytes(t, []byte(strings.Replace(strings.Replace(in, "replicas: 3", "replicas: 5", 1), "image: registry.test/app:1", "image: registry.test/app:2", 1)))
	want := strings.Replace(strings.Replace(uninjectDeploy, "replicas: 3", "replicas: 5", 1), "image: registry.test/app:1", "image: registry.test/app:2", 1)
	if err != nil || string(out) != want {
		t.Errorf("edits outside the wrap: %v\n%s", err, lineDiff(want, string(out)))
	}
	if len(reports) != 1 || !reports[0].Injected || reports[0].Object != `Deployment "shop/api"` {
		t.Errorf("reports: %+v", reports)
	}

	for _, tc := range []struct{ name, from, to, want string }{
		{"command", "        - /api\n", "        - /api2\n",
			`line 1: Deployment "shop/api": spec.template.spec.containers[0].command: changed since restart-injector inject wrote it; restore it, or edit the original manifest and inject it again`},
		{"env", "        - name: RESTART_SUPERVISOR_STATE_DIR\n          value: /run/restart-supervisor\n", "",
			`line 1: Deployment "shop/api": spec.template.spec.containers[0].env[3]: missing: changed since restart-injector inject wrote it`},
		{"rules again", "        - /api\n", "        - /api\n        restartPolicy: Always\n",
			`line 1: Deployment "shop/api": spec.template.spec.containers[0].restartPolicy: present again: changed since`},
		{"install container", "name: restart-supervisor-install", "name: other",
			`line 1: Deployment "shop/api": spec.template.spec.initContainers: changed since`},
		{"record", `"undo":[`, `"undo":[1,`,
			`line 1: Deployment "shop/api": metadata.annotations[restart-supervisor.dev/uninject]: invalid: json: cannot unmarshal number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edited := strings.Replace(in, tc.from, tc.to, 1)
			if edited == in {
				t.Fatalf("%q not in the injected document:\n%s", tc.from, in)
			}
			out, _, err := uninjectBytes(t, []byte(edited))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v\nwant one line starting %q", err, tc.want)
			}
			if string(out) != edited {
				t.Errorf("a document that cannot be uninjected was not written back as it was")
			}
		})
	}
}

// TestUninjectWithoutRecord: a document wrapped by someone else (the
// webhook) is left as it is, with a warning naming it; one never wrapped
// passes without a word.
func TestUninjectWithoutRecord(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(goldenDir, "in", "already-injected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src = append(src, []byte("---\n"+uninjectDeploy)...)
	out, reports, err := uninjectBytes(t, src)
	if err != nil || !bytes.Equal(out, src) {
		t.Fatalf("changed (%v):\n%s", err, lineDiff(string(src), string(out)))
	}
	warned := 0
	for _, r := range reports {
		if r.Injected {
			t.Errorf("%s reported as uninjected", r.Object)
		}
		for _, w := range r.Warnings {
			if !strings.Contains(w, "is wrapped but carries no restart-supervisor.dev/uninject annotation") {
				t.Errorf("warning %q", w)
			}
			warned++
		}
	}
	if warned == 0 {
		t.Errorf("no warning for a wrapped document without a record: %+v", reports)
	}
}

// TestUninjectAnchorsEdited: a document inject wrote from its object
// comes back as it was when untouched (tested in TestUninjectGolden); an
// edit made since is kept, in the object's form.
func TestUninjectAnchorsEdited(t *testing.T) {
	inj, _ := goldenInjector(t)
	src, err := os.ReadFile(filepath.Join(goldenDir, "in", "anchors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	injected, _ := injectBytes(t, inj, src)
	edited := strings.Replace(string(injected), "\n  name: anchored\n", "\n  name: renamed\n", 1)
	if edited == string(injected) {
		t.Fatalf("name: anchored not in the injected document:\n%s", injected)
	}
	out, _, err := uninjectBytes(t, []byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ReadManifests(out)
	o, _ := ReadManifests(src)
	if got := m.Docs[0].Object["metadata"].(map[string]any)["name"]; got != "renamed" {
		t.Errorf("the edit was lost: name %v", got)
	}
	m.Docs[0].Object["metadata"].(map[string]any)["name"] = "anchored"
	a, _ := json.Marshal(m.Docs[0].Object)
	b, _ := json.Marshal(o.Docs[0].Object)
	if !bytes.Equal(a, b) {
		t.Errorf("not the original object:\n%s\n%s", a, b)
	}
}

// TestUninjectListNamesTheItem: in a List whose items were injected, wrapped
// by someone else, or edited, an error names the item it is about.
func TestUninjectListNamesTheItem(t *testing.T) {
	inj, _ := goldenInjector(t)
	item := func(name string) string {
		d := strings.Replace(uninjectDeploy, "name: api\n", "name: "+name+"\n", 1)
		lines := strings.Split(strings.TrimSuffix(d, "\n"), "\n")
		for i := range lines {
			if i == 0 {
				lines[i] = "- " + lines[i]
			} else {
				lines[i] = "  " + lines[i]
			}
		}
		return strings.Join(lines, "\n") + "\n"
	}
	list := "apiVersion: v1\nkind: List\nitems:\n" + item("first") + item("second")
	injected, _ := injectBytes(t, inj, []byte(list))
	webhook, err := os.ReadFile(filepath.Join(goldenDir, "in", "already-injected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The second item is edited; a pod wrapped without a record follows.
	in := string(injected)
	at := strings.Index(in, "name: second")
	edited := in[:at] + strings.Replace(in[at:], "- /api\n", "- /api2\n", 1)
	var pod []string
	for _, l := range strings.Split(strings.TrimSuffix(strings.SplitN(string(webhook), "\n---", 2)[0], "\n"), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if len(pod) == 0 {
			pod = append(pod, "- "+l)
		} else {
			pod = append(pod, "  "+l)
		}
	}
	edited += strings.Join(pod, "\n") + "\n"
	_, _, err = uninjectBytes(t, []byte(edited))
	if err == nil || !strings.Contains(err.Error(), `Deployment "shop/second": spec.template.spec.containers[0].command: changed since`) {
		t.Errorf("error %v, want it to name the second Deployment", err)
	}
}

// TestUninjectRefusesForeignRecord (L1): the undo record is text in the
// file, and whoever edits the file may rewrite it. uninject followed any
// operation, so a record could add hostPID or a privileged container to
// what it gave back. Now every operation must undo an edit inject makes,
// and give back the member its path names.
func TestUninjectRefusesForeignRecord(t *testing.T) {
	inj, _ := goldenInjector(t)
	injected, _ := injectBytes(t, inj, []byte(uninjectDeploy))
	var obj map[string]any
	if err := kubeyaml.Unmarshal(injected, &obj); err != nil {
		t.Fatal(err)
	}
	ann := obj["metadata"].(map[string]any)["annotations"].(map[string]any)
	record := ann[contract.AnnotationUndo].(string)
	for _, tc := range []struct {
		name string
		op   undoOp
		want string
	}{
		{"hostPID", undoOp{Op: "insert", Path: "/spec/template/spec/hostPID", Was: "hostPID: true\n"},
			`insert "/spec/template/spec/hostPID": not an edit restart-injector inject makes`},
		{"privileged", undoOp{Op: "insert", Path: "/spec/template/spec/containers/0/securityContext", Was: "securityContext: {privileged: true}\n"},
			`insert "/spec/template/spec/containers/0/securityContext": not an edit restart-injector inject makes`},
		{"privileged under another name", undoOp{Op: "insert", Path: "/spec/template/spec/containers/0/livenessProbe", Was: "securityContext: {privileged: true}\n"},
			`insert "/spec/template/spec/containers/0/livenessProbe": the value it gives back is not that member`},
		{"image", undoOp{Op: "replace", Path: "/spec/template/spec/containers/0/image", Was: "image: evil:1\n", Sum: "x"},
			`replace "/spec/template/spec/containers/0/image": not an edit`},
		{"outside the template", undoOp{Op: "remove", Path: "/spec/selector", Sum: "x"},
			`remove "/spec/selector": not an edit`},
		{"another annotation", undoOp{Op: "replace", Path: "/spec/template/metadata/annotations/other", Was: "other: x\n"},
			`replace "/spec/template/metadata/annotations/other": not an edit`},
		// inject only adds to metadata, annotations, env and volumes: a
		// record that replaces them may give back only what they hold.
		{"the template's metadata", undoOp{Op: "replace", Path: "/spec/template/metadata", Was: "metadata: {labels: {app: evil}}\n"},
			`replace "/spec/template/metadata": gives back what the document does not hold`},
		{"the template's annotations", undoOp{Op: "replace", Path: "/spec/template/metadata/annotations", Was: "annotations: {a: b}\n"},
			`replace "/spec/template/metadata/annotations": gives back what the document does not hold`},
		{"a container's env", undoOp{Op: "replace", Path: "/spec/template/spec/containers/0/env", Was: "env: [{name: LD_PRELOAD, value: /evil.so}]\n"},
			`replace "/spec/template/spec/containers/0/env": gives back what the document does not hold`},
		{"the volumes", undoOp{Op: "replace", Path: "/spec/template/spec/volumes", Was: "volumes: [{name: root, hostPath: {path: /}}]\n"},
			`replace "/spec/template/spec/volumes": gives back what the document does not hold`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec undoRecord
			if err := json.Unmarshal([]byte(record), &rec); err != nil {
				t.Fatal(err)
			}
			// Undone last first: the forged operation goes first.
			rec.Undo = append(rec.Undo, tc.op)
			b, _ := json.Marshal(rec)
			ann[contract.AnnotationUndo] = string(b)
			edited, err := kubeyaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := uninjectBytes(t, edited)
			want := `line 1: Deployment "shop/api": metadata.annotations[restart-supervisor.dev/uninject]: ` + tc.want
			if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v\nwant one line starting %q", err, want)
			}
			if string(out) != string(edited) {
				t.Errorf("a refused record changed the document:\n%s", lineDiff(string(edited), string(out)))
			}
		})
	}
}

// TestWithinIsBounded: within matches a value the undo record gives back
// against the document's; both are the file's, and a hostile pair of
// long, nearly equal sequences of wide mappings costs their product. The
// check stops at withinSteps and refuses, where it would otherwise walk
// about 8 million member comparisons; a real value still matches.
func TestWithinIsBounded(t *testing.T) {
	item := func(last string) string {
		var b strings.Builder
		b.WriteString("{")
		for k := range 40 {
			fmt.Fprintf(&b, "k%d: v, ", k)
		}
		b.WriteString("z: " + last + "}")
		return b.String()
	}
	seq := func(n int, last string) *textyaml.Node {
		var d textyaml.Node
		if err := textyaml.Unmarshal([]byte("["+strings.Repeat(item(last)+", ", n)+"]"), &d); err != nil {
			t.Fatal(err)
		}
		return d.Content[0]
	}
	cur := seq(5000, "v")
	steps := withinSteps
	if within(seq(2, "nomatch"), cur, &steps) || steps >= 0 {
		t.Errorf("within of a hostile pair: steps left %d, want the check stopped and refused", steps)
	}
	steps = withinSteps
	if !within(seq(2, "v"), cur, &steps) {
		t.Errorf("within of two items the document holds: refused (steps left %d)", steps)
	}
}
