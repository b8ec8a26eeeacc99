package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

const deployYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: worker
spec:
  selector:
    matchLabels: {app: worker}
  template:
    metadata:
      labels: {app: worker}
    spec:
      containers:
      - name: worker
        image: IMAGE
        command: ["/work"]
        restartPolicy: Never
        restartPolicyRules:
        - action: Restart
          exitCodes: {operator: In, values: [42]}
`

const serviceYAML = `apiVersion: v1
kind: Service
metadata:
  name: worker  # kept byte for byte
spec: {ports: [{port: 80}]}
`

func runCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	var code int
	switch args[0] {
	case "inject":
		code = runInject(context.Background(), args[1:], strings.NewReader(stdin), &out, &errb)
	case "explain":
		code = runExplain(args[1:], strings.NewReader(stdin), &out, &errb)
	default:
		t.Fatalf("no such subcommand %q", args[0])
	}
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDispatchUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"help"}, stdio{strings.NewReader(""), &out, &errb}); code != exitOK {
		t.Errorf("help: exit %d", code)
	}
	for _, sub := range []string{"inject", "explain"} {
		if !strings.Contains(out.String(), "  "+sub+" ") {
			t.Errorf("usage does not list %s:\n%s", sub, out.String())
		}
	}
	if code := dispatch(context.Background(), nil, stdio{strings.NewReader(""), &out, &errb}); code != exitUsage {
		t.Errorf("no command: exit %d", code)
	}
	errb.Reset()
	if code := dispatch(context.Background(), []string{"bogus"}, stdio{strings.NewReader(""), &out, &errb}); code != exitUsage || !strings.Contains(errb.String(), `unknown command "bogus"`) {
		t.Errorf("unknown command: exit %d, %s", code, errb.String())
	}
}

func TestInjectUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"inject"},
		{"inject", "-f"},
		{"inject", "--bogus", "-f", "x"},
		{"inject", "-f", "x", "extra"},
		{"inject", "-f", "x", "-volume-medium", "HugePages"},
		{"explain"},
	} {
		if code, _, errOut := runCmd(t, "", args...); code != exitUsage || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q; want %d and a message", args, code, errOut, exitUsage)
		}
	}
	if code, _, _ := runCmd(t, "", "inject", "-h"); code != exitOK {
		t.Errorf("-h: exit %d", code)
	}
}

func TestInjectFileKeepsOtherDocuments(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, filepath.Join(dir, "app.yaml"), strings.ReplaceAll(deployYAML, "IMAGE", "registry.test/w:1")+"---\n"+serviceYAML)
	code, out, errOut := runCmd(t, "", "inject", "--no-lookup", "--supervisor-image", "example.test/sup:1", "-f", f)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"- /opt/restart-supervisor/restart-supervisor\n",
		"image: example.test/sup:1",
		"---\n" + serviceYAML,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The undo record keeps them as text; the containers must not.
	withoutRecord := regexp.MustCompile(`(?m)^ *`+regexp.QuoteMeta(contract.AnnotationUndo)+`: .*\n`).ReplaceAllString(out, "")
	if strings.Contains(withoutRecord, "restartPolicyRules:\n") || strings.Contains(withoutRecord, "restartPolicy: Never") {
		t.Errorf("translated fields left in the output:\n%s", out)
	}
	if !strings.Contains(errOut, `Deployment "worker" injected (worker)`) {
		t.Errorf("stderr report: %q", errOut)
	}
}

func TestInjectFailures(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, filepath.Join(dir, "bad.yaml"), strings.ReplaceAll(strings.ReplaceAll(deployYAML, "IMAGE", "x"), "operator: In", "operator: Maybe"))
	code, out, errOut := runCmd(t, "", "inject", "--no-lookup", "-f", bad)
	if code != exitFailure || out != "" || !strings.Contains(errOut,
		`Deployment "worker": spec.template.spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "Maybe"`) {
		t.Errorf("invalid rules: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	nocmd := writeFile(t, filepath.Join(dir, "nocmd.yaml"), strings.ReplaceAll(strings.ReplaceAll(deployYAML, "IMAGE", "registry.test/w:1"), `command: ["/work"]`, ""))
	code, _, errOut = runCmd(t, "", "inject", "--no-lookup", "-f", nocmd)
	if code != exitFailure || !strings.Contains(errOut, `container "worker": cannot determine the entrypoint of image "registry.test/w:1"`) {
		t.Errorf("no command without lookup: exit %d, %q", code, errOut)
	}
	if code, _, errOut = runCmd(t, "", "inject", "-f", filepath.Join(dir, "missing.yaml")); code != exitFailure || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing file: exit %d, %q", code, errOut)
	}
	garbage := writeFile(t, filepath.Join(dir, "garbage.yaml"), "a: [1\n")
	if code, _, errOut = runCmd(t, "", "inject", "-f", garbage); code != exitFailure || !strings.Contains(errOut, "line 1") {
		t.Errorf("invalid YAML: exit %d, %q", code, errOut)
	}
	// A good document before a bad one: nothing is written, so nothing
	// was injected, and the good one is not reported as if it were.
	good := strings.ReplaceAll(deployYAML, "IMAGE", "x")
	mixed := writeFile(t, filepath.Join(dir, "mixed.yaml"), good+"---\n"+strings.ReplaceAll(good, "operator: In", "operator: Maybe"))
	code, out, errOut = runCmd(t, "", "inject", "--no-lookup", "-f", mixed)
	if code != exitFailure || out != "" || strings.Contains(errOut, "injected") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("a good and a bad document: exit %d, stdout %q, stderr %q; want nothing written, the bad one's line alone and no object reported injected", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "", "inject", "--no-lookup", "--continue-on-error", "-f", mixed)
	if code != exitOK || !strings.Contains(out, "restart-supervisor") || !strings.Contains(errOut, `Deployment "worker" injected`) || !strings.Contains(errOut, "warning: left unchanged") {
		t.Errorf("--continue-on-error: exit %d, stderr %q; want the good one written and reported", code, errOut)
	}
}

func TestInjectDirectoryAndStdin(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a", "deploy.yaml"), strings.ReplaceAll(deployYAML, "IMAGE", "x"))
	writeFile(t, filepath.Join(dir, "b", "c", "pod.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"x","command":["/c"],"restartPolicy":"Never"}]}}`)
	writeFile(t, filepath.Join(dir, "notes.txt"), "not a manifest")
	code, out, errOut := runCmd(t, "", "inject", "--no-lookup", "-q", "-f", dir)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d: %q", code, errOut)
	}
	if strings.Count(out, contract.SupervisorPath) != 2 || !strings.Contains(out, "\n---\n{") {
		t.Errorf("directory output:\n%s", out)
	}
	code, out, _ = runCmd(t, strings.ReplaceAll(deployYAML, "IMAGE", "x"), "inject", "--no-lookup", "-f", "-")
	if code != exitOK || !strings.Contains(out, contract.SupervisorPath) {
		t.Errorf("stdin: exit %d\n%s", code, out)
	}
}

func TestInjectDiff(t *testing.T) {
	f := writeFile(t, filepath.Join(t.TempDir(), "d.yaml"), strings.ReplaceAll(deployYAML, "IMAGE", "x"))
	code, out, _ := runCmd(t, "", "inject", "--no-lookup", "--diff", "-f", f)
	if code != exitOK {
		t.Fatal(code)
	}
	for _, want := range []string{"--- " + f, "+++ " + f + " (injected)", "-        command: [\"/work\"]", "+        - /opt/restart-supervisor/restart-supervisor"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
}

// TestInjectLooksUpTheRegistry runs the CLI against go-containerregistry's
// in-process registry on loopback over plain HTTP, which needs
// --insecure-registry.
func TestInjectLooksUpTheRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/app:1"
	img, _ := random.Image(64, 1)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint, cf.Config.Cmd = []string{"/entry"}, []string{"--from-image"}
	img, _ = mutate.ConfigFile(img, cf)
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	f := writeFile(t, filepath.Join(t.TempDir(), "d.yaml"), strings.ReplaceAll(strings.ReplaceAll(deployYAML, "IMAGE", ref), `command: ["/work"]`, ""))
	host := strings.TrimPrefix(srv.URL, "http://")
	code, _, errOut := runCmd(t, "", "inject", "-f", f)
	if code != exitFailure || !strings.Contains(errOut, "registry "+host+": plain HTTP is used only for registries the operator lists with --insecure-registry") {
		t.Errorf("without --insecure-registry: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCmd(t, "", "inject", "-f", f, "--insecure-registry", host, "--allowed-registries", "registry.test,other.test:5000")
	if code != exitFailure || !strings.Contains(errOut, "registry "+host+": the operator restricts image lookups to other registries (--allowed-registries)") {
		t.Errorf("registry not allowed: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := runCmd(t, "", "inject", "-f", f, "--insecure-registry", host, "--allowed-registries", host)
	if code != exitOK || !strings.Contains(out, "        - --\n        - /entry\n        - --from-image\n") {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	if code, _, errOut := runCmd(t, "", "inject", "-f", f, "--insecure-registry", "http://"+host); code != exitUsage || !strings.Contains(errOut, `registry "http://`+host+`": want HOST or HOST:PORT`) {
		t.Errorf("bad --insecure-registry: exit %d, stderr %q", code, errOut)
	}
}

func TestExplain(t *testing.T) {
	f := writeFile(t, filepath.Join(t.TempDir(), "d.yaml"), strings.ReplaceAll(deployYAML, "IMAGE", "x")+"---\n"+serviceYAML)
	code, out, errOut := runCmd(t, "", "explain", "-f", f)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	if lines[0] != `Deployment "worker", pod restartPolicy Always` {
		t.Errorf("header %q", lines[0])
	}
	want := [][]string{
		{"worker", "0-41, 43-255", "container policy Never", "hold", "stays terminated", "shows Running, not Terminated"},
		{"42", "rule 0: Restart In [42]", "restart in place", "kubelet restarts it", "restartCount unchanged"},
	}
	for i, w := range want {
		row := lines[2+i]
		last := 0
		for _, cell := range w {
			j := strings.Index(row[last:], cell)
			if j < 0 {
				t.Errorf("row %q lacks %q after column %d", row, cell, last)
				break
			}
			last += j + len(cell)
		}
	}
	if !strings.Contains(out, "restart in place: ") {
		t.Errorf("no legend:\n%s", out)
	}
	bad := writeFile(t, filepath.Join(t.TempDir(), "bad.yaml"), strings.ReplaceAll(strings.ReplaceAll(deployYAML, "IMAGE", "x"), "restartPolicy: Never", "restartPolicy: Sometimes"))
	if code, _, errOut := runCmd(t, "", "explain", "-f", bad); code != exitFailure || !strings.Contains(errOut, `Unsupported value: "Sometimes"`) {
		t.Errorf("invalid rules: exit %d %q", code, errOut)
	}
}

// TestExplainSaysWhoSetsThePodPolicy: for a kind whose controller sets
// the pod policy (Kubeflow's replica specs), explain names the field it
// reads, so that a user sees why it is not the template's.
func TestExplainSaysWhoSetsThePodPolicy(t *testing.T) {
	code, out, errOut := runCmd(t, "", "explain", "-f", filepath.Join("..", "..", "injector", "testdata", "in", "crds.yaml"))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `PyTorchJob "ml/pytorch" spec.pytorchReplicaSpecs.Master.template, pod restartPolicy Never (the PyTorchJob controller sets it from spec.pytorchReplicaSpecs.Master.restartPolicy)`
	if !strings.Contains(out, want+"\n") {
		t.Errorf("explain lacks %q:\n%s", want, out)
	}
	if !strings.Contains(out, `JobSet "trainer" spec.replicatedJobs[0].template.spec.template, pod restartPolicy Never`+"\n") {
		t.Errorf("a template's own policy is not shown plainly:\n%s", out)
	}
}

// A sidecar with rules is refused by the API servers of 1.34 and 1.35 and
// accepted from 1.36, the default; so are the messages.
func TestInjectAndExplainKubernetesVersion(t *testing.T) {
	dir := t.TempDir()
	sidecar := strings.ReplaceAll(deployYAML, "      containers:\n", `      initContainers:
      - name: proxy
        image: registry.test/proxy:1
        command: ["/proxy"]
        restartPolicy: Always
        restartPolicyRules:
        - action: Restart
          exitCodes: {operator: In, values: [3]}
      containers:
`)
	f := writeFile(t, filepath.Join(dir, "sidecar.yaml"), strings.ReplaceAll(sidecar, "IMAGE", "registry.test/w:1"))
	const forbidden = `Deployment "worker": spec.template.spec.initContainers[0].restartPolicyRules: Forbidden: restartPolicyRules are not allowed for init containers with restart policy Always`
	for _, base := range [][]string{{"inject", "--no-lookup", "-f", f}, {"explain", "-f", f}} {
		for _, v := range []string{"1.34", "v1.35.4"} {
			code, out, errOut := runCmd(t, "", append(base, "--kubernetes-version", v)...)
			if code != exitFailure || out != "" || !strings.Contains(errOut, forbidden) {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q", base[0], v, code, out, errOut)
			}
		}
		if code, _, errOut := runCmd(t, "", base...); code != exitOK {
			t.Errorf("%s with the default version: exit %d, %s", base[0], code, errOut)
		}
		if code, _, errOut := runCmd(t, "", append(base, "--kubernetes-version", "1.33")...); code != exitUsage || !strings.Contains(errOut, "known versions are 1.34, 1.35, 1.36, 1.37") {
			t.Errorf("%s 1.33: exit %d, %q", base[0], code, errOut)
		}
	}
	many := writeFile(t, filepath.Join(dir, "many.yaml"), strings.ReplaceAll(strings.ReplaceAll(deployYAML, "IMAGE", "x"), "values: [42]", "values: ["+strings.Repeat("1, ", 255)+"1]"))
	for v, want := range map[string]string{
		"1.35": "values: Too long: may not be more than 255 bytes",
		"1.36": "values: Too many: 256: must have at most 255 items",
	} {
		if code, _, errOut := runCmd(t, "", "inject", "--no-lookup", "--kubernetes-version", v, "-f", many); code != exitFailure || !strings.Contains(errOut, want) {
			t.Errorf("inject %s: exit %d, %q lacks %q", v, code, errOut, want)
		}
	}
}

// TestInjectReportsCustomResources: a custom resource's templates are
// injected and named in the report; rules no pod template holds are
// reported, not passed over in silence.
func TestInjectReportsCustomResources(t *testing.T) {
	f := filepath.Join("..", "..", "injector", "testdata", "in", "crds.yaml")
	code, out, errOut := runCmd(t, "", "inject", "--no-lookup", "--supervisor-image", "example.test/sup:1", "-f", f)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`JobSet "trainer" injected (spec.replicatedJobs[1].template.spec.template/worker)`,
		`PyTorchJob "ml/pytorch" injected (spec.pytorchReplicaSpecs.Master.template/pytorch, spec.pytorchReplicaSpecs.Worker.template/pytorch)`,
		`Trainer "custom" injected (chief)`,
		`line 218: Workflow "argo" not injected: it carries restart rules but no pod template was found in it`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if n := strings.Count(out, "name: restart-supervisor-install"); n != 9 {
		t.Errorf("%d install containers, want one per ruled template (9):\n%s", n, out)
	}
}

// TestInjectNamesEveryBadDocument: two bad documents in one stream are
// both named; with --continue-on-error the good ones are injected and the
// bad ones written back as they were.
func TestInjectNamesEveryBadDocument(t *testing.T) {
	good := strings.ReplaceAll(deployYAML, "IMAGE", "x")
	badRules := strings.ReplaceAll(good, "operator: In", "operator: Maybe")
	badYAML := "a: [1\n"
	stream := badRules + "---\n" + good + "---\n" + badYAML
	f := writeFile(t, filepath.Join(t.TempDir(), "mixed.yaml"), stream)
	code, out, errOut := runCmd(t, "", "inject", "--no-lookup", "-q", "-f", f)
	if code != exitFailure || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errOut, `Unsupported value: "Maybe"`) || !strings.Contains(errOut, "document at line ") || strings.Count(errOut, "\n") != 2 {
		t.Errorf("want both bad documents named, one line each:\n%s", errOut)
	}
	code, out, errOut = runCmd(t, "", "inject", "--no-lookup", "-q", "--continue-on-error", "-f", f)
	if code != exitOK || strings.Count(errOut, "warning: left unchanged: ") != 2 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	docs := strings.Split(out, "---\n")
	if len(docs) != 3 || docs[0] != badRules || !strings.Contains(docs[1], contract.SupervisorPath) || docs[2] != badYAML {
		t.Errorf("output:\n%s", out)
	}
}

// TestInjectOutputFile: -o writes the injected stream to a file, also over
// the input itself; a failed run leaves the file as it was.
func TestInjectOutputFile(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, filepath.Join(dir, "app.yaml"), strings.ReplaceAll(deployYAML, "IMAGE", "x"))
	code, out, errOut := runCmd(t, "", "inject", "--no-lookup", "-q", "-f", f, "-o", f)
	if code != exitOK || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	got, err := os.ReadFile(f)
	if err != nil || !strings.Contains(string(got), contract.SupervisorPath) {
		t.Fatalf("the file was not replaced by the injected stream: %v\n%s", err, got)
	}
	bad := writeFile(t, filepath.Join(dir, "bad.yaml"), "a: [1\n")
	target := writeFile(t, filepath.Join(dir, "out.yaml"), "kept\n")
	if code, _, _ := runCmd(t, "", "inject", "--no-lookup", "-f", bad, "-o", target); code != exitFailure {
		t.Fatalf("bad input: exit %d", code)
	}
	if b, _ := os.ReadFile(target); string(b) != "kept\n" {
		t.Errorf("a failed run changed the output file: %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

// explain lists each re-run sidecar right after its init container, and
// the warning of a pod that gets none.
func TestExplainRerun(t *testing.T) {
	pod := `apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  restartPolicy: Never
  initContainers:
  - name: fetch
    image: registry.test/app:1
    command: ["/fetch"]
    resources: {limits: {cpu: "1", memory: 1Gi}}
  containers:
  - name: trainer
    image: registry.test/app:1
    command: ["/train"]
    resources: {limits: {cpu: "1", memory: LIMIT}}
    restartPolicy: Never
    restartPolicyRules:
    - action: RestartAllContainers
      exitCodes: {operator: In, values: [88]}
`
	burstable := strings.NewReplacer("NAME", "burstable", "    resources: {limits: {cpu: \"1\", memory: LIMIT}}\n", "").Replace(pod)
	guaranteed := strings.NewReplacer("NAME", "guaranteed", "LIMIT", "1Gi").Replace(pod)
	f := writeFile(t, filepath.Join(t.TempDir(), "p.yaml"), burstable+"---\n"+guaranteed)
	code, out, errOut := runCmd(t, "", "explain", "-f", f)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	objects := strings.Split(out, "\n\n")
	if len(objects) < 2 {
		t.Fatalf("output:\n%s", out)
	}
	lines := strings.Split(objects[0], "\n")
	var rows []string
	for _, l := range lines[2:] {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(l, " ") {
			rows = append(rows, strings.Join(f[:2], " "))
		}
	}
	if want := []string{"fetch (init)", "fetch-rerun (re-run", "trainer 0-87,"}; !slices.Equal(rows, want) {
		t.Errorf("containers %q, want %q:\n%s", rows, want, objects[0])
	}
	for _, want := range []string{
		"re-run done: the containers after it start",
		"the containers after it end: the pod fails",
	} {
		if !strings.Contains(objects[0], want) {
			t.Errorf("no %q:\n%s", want, objects[0])
		}
	}
	if strings.Contains(objects[0], "warning:") {
		t.Errorf("warning for the burstable pod:\n%s", objects[0])
	}
	warning := `warning: Pod "guaranteed": init container "fetch" is not run again on a pod restart: a re-run sidecar would change the pod's QoS class or limits, since every container declares cpu and memory limits; see docs/pod-level.md`
	if !strings.Contains(objects[1], warning) || strings.Contains(objects[1], "fetch-rerun") {
		t.Errorf("guaranteed pod: want no re-run and %q:\n%s", warning, objects[1])
	}
	if !strings.Contains(out, "re-run: a sidecar the injector adds") {
		t.Errorf("no legend for re-runs:\n%s", out)
	}
}

// TestOutputFlagIsAFileNotAFormat: -o names the file to write, as
// istioctl's. `-o yaml` or `-o json`, read as kubectl's output formats,
// would write a file named yaml and print nothing: they are refused with a
// usage error that says so, and nothing is written; -o ./yaml writes that
// file.
func TestOutputFlagIsAFileNotAFormat(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	in := writeFile(t, filepath.Join(dir, "job.yaml"), deployYAML)
	for _, format := range []string{"yaml", "json", "wide", "jsonpath={.items}"} {
		code, out, errOut := runCmd(t, "", "inject", "-f", in, "-o", format)
		if code != exitUsage || !strings.Contains(errOut, "-o names the file to write") || out != "" {
			t.Errorf("-o %s: exit %d, stdout %q, stderr %q; want %d and the -o message", format, code, out, errOut, exitUsage)
		}
		if _, err := os.Stat(filepath.Join(dir, format)); !os.IsNotExist(err) {
			t.Errorf("-o %s wrote a file named %s", format, format)
		}
	}
	if code, _, errOut := runCmd(t, "", "inject", "-q", "-f", in, "-o", "./yaml"); code != exitOK {
		t.Fatalf("-o ./yaml: exit %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "yaml")); err != nil || !strings.Contains(string(b), "restart-supervisor") {
		t.Fatalf("-o ./yaml: %v, %q", err, b)
	}
}
