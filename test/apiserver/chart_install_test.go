package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestHelmInstall installs the chart with the real helm onto a real etcd +
// kube-apiserver as release rel in namespace other (`helm install rel -n
// other`: self-managed certificates, and every optional component whose API
// that server has: custom workloads, the NetworkPolicy, the node agent with
// --annotate), runs the built webhook as the installed ServiceAccount, with
// the names the installed Deployment passes it, through the checks of the
// kustomize install, and uninstalls: afterwards nothing of the webhook may be
// left to refuse pods.
func TestHelmInstall(t *testing.T) {
	h := newHelm(t)
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	dir := t.TempDir()
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	// The release's namespace, labelled as values.yaml asks.
	const ns, release, name, agentNS, agent = "other", "rel", "rel-restart-injector", "other-node-agent", "rel-restart-injector-node-agent"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, err := h.run2("install", release, chartDir(t), "--kubeconfig", admin, "--namespace", ns,
		"--set", "certificates.source=self", "--set", "customWorkloads.enabled=true", "--set", "webhookIngress.enabled=true",
		"--set", "nodeAgent.enabled=true", "--set", "nodeAgent.annotate=true")
	t.Logf("helm install:\n%s%s", stdout, stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(stdout, []byte("STATUS: deployed")) || !bytes.Contains(stdout, []byte("(self-managed certificates)")) {
		t.Errorf("helm install did not report the release deployed with its notes:\n%s", stdout)
	}
	// helm passes on the API server's warnings: the node agent's namespace
	// warns at baseline, for its one hostPath. The webhook's enforces
	// restricted, which its pods must pass without a warning.
	if !bytes.Contains(stderr, []byte("baseline:latest")) || !bytes.Contains(stderr, []byte("kubelet-pods")) {
		t.Errorf("no Pod Security warning for the node agent's hostPath in helm's output:\n%s", stderr)
	}
	if bytes.Contains(stderr, []byte("restricted:latest")) {
		t.Errorf("the webhook's own Deployment violates its namespace's Pod Security level:\n%s", stderr)
	}

	out, err := h.run("status", release, "--kubeconfig", admin, "--namespace", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Info struct{ Status string } `json:"info"`
	}
	if err := json.Unmarshal(out, &status); err != nil || status.Info.Status != "deployed" {
		t.Errorf("helm status: %v %q\n%s", err, status.Info.Status, out)
	}

	// Every field helm applied is what the API server holds (which only adds
	// its defaults): nothing dropped as unknown, nothing rewritten.
	manifest, err := h.run("get", "manifest", release, "--kubeconfig", admin, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	applied := parseObjects(t, "helm get manifest", manifest)
	mf := filepath.Join(dir, "manifest.yaml")
	must(t, os.WriteFile(mf, manifest, 0o644))
	out, err = exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", admin, "get", "-f", mf, "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get -f (helm's manifest): %v", err)
	}
	var list struct{ Items []map[string]any }
	must(t, json.Unmarshal(out, &list))
	if len(list.Items) != len(applied) || len(applied) < 20 {
		t.Errorf("helm applied %d objects, the API server returns %d", len(applied), len(list.Items))
	}
	for _, stored := range list.Items {
		meta, _ := stored["metadata"].(map[string]any)
		key := strings.Replace(fmt.Sprintf("%v %v %v/%v", stored["apiVersion"], stored["kind"], meta["namespace"], meta["name"]), " <nil>/", " /", 1)
		want, ok := applied[key]
		if !ok {
			t.Errorf("the API server returns %s, which helm did not apply", key)
			continue
		}
		for _, d := range notIn("", want, stored) {
			t.Errorf("%s %s", key, d)
		}
	}

	// What the API server holds, read back through its API.
	for key := range applied {
		if strings.Contains(key, " restart-supervisor") {
			t.Errorf("helm applied %s, in deploy/'s namespace rather than the release's", key)
		}
	}
	mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, w := range mwc.Webhooks {
		entries = append(entries, w.Name)
	}
	if got := strings.Join(entries, ","); got != "inject.restart-supervisor.dev,templates.restart-supervisor.dev,custom-templates.restart-supervisor.dev" ||
		len(mwc.Webhooks[0].MatchConditions) != 1 || len(mwc.Webhooks[1].MatchConditions) != 1 {
		t.Errorf("installed webhook entries %s, matchConditions %d and %d", got, len(mwc.Webhooks[0].MatchConditions), len(mwc.Webhooks[1].MatchConditions))
	}
	if s := mwc.Webhooks[0].ClientConfig.Service; s == nil || s.Namespace != ns || s.Name != name {
		t.Errorf("the webhook calls Service %+v, want %s/%s", s, ns, name)
	}
	if mwc.Labels["app.kubernetes.io/managed-by"] != "Helm" || mwc.Labels["app.kubernetes.io/instance"] != release ||
		mwc.Annotations["meta.helm.sh/release-name"] != release || mwc.Annotations["meta.helm.sh/release-namespace"] != ns {
		t.Errorf("the MutatingWebhookConfiguration is not the release's: %v %v", mwc.Labels, mwc.Annotations)
	}
	d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 2 || !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "), "--cert-mode=self") {
		t.Errorf("Deployment %s: %v", name, d.Spec.Template.Spec.Containers[0].Args)
	}
	// The names the installed webhook is told, which its RBAC must allow.
	var names []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		for _, f := range []string{"--service=", "--webhook-config=", "--ca-secret="} {
			if strings.HasPrefix(a, f) {
				names = append(names, a)
			}
		}
	}
	if want := []string{"--service=" + name, "--webhook-config=" + name, "--ca-secret=" + name + "-ca"}; !reflect.DeepEqual(names, want) {
		t.Errorf("the Deployment names %v, want %v", names, want)
	}
	if ds, err := client.AppsV1().DaemonSets(agentNS).Get(ctx, agent, metav1.GetOptions{}); err != nil ||
		!strings.Contains(strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " "), "--annotate") {
		t.Errorf("DaemonSet %s: %v", agent, err)
	}
	if _, err := client.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("NetworkPolicy: %v", err)
	}

	// The installed configuration and RBAC at work (the CA Secret, the
	// caBundle patch of the configuration by name), then the webhook stops.
	// The helm test hook's pod, created as `helm test` creates it while the
	// webhook serves, comes back wrapped (whether it then passes needs a
	// kubelet: `restart-supervisor status` exits 0 only under a supervisor).
	hooks, err := h.run("get", "hooks", release, "--kubeconfig", admin, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	testPod := func() {
		objs := parseObjects(t, "helm get hooks", hooks)
		raw, ok := objs["v1 Pod default/"+name+"-test-injected"]
		if !ok || len(objs) != 1 {
			t.Fatalf("helm test hooks: %v", sortedKeys(objs))
		}
		b, _ := json.Marshal(raw)
		var pod corev1.Pod
		must(t, json.Unmarshal(b, &pod))
		got, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, &pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the helm test pod: %v", err)
		}
		assertInjected(t, got, "check")
		if c := got.Spec.Containers[0]; !strings.HasSuffix(strings.Join(append(c.Command, c.Args...), " "), " /restart-supervisor status") {
			t.Errorf("the helm test pod runs %v %v", c.Command, c.Args)
		}
	}
	serveAsInstalled(t, env, client, dir, ns, name, testPod, names...)
	if _, err := client.CoreV1().Secrets(ns).Get(ctx, name+"-ca", metav1.GetOptions{}); err != nil {
		t.Errorf("the webhook's CA Secret: %v", err)
	}

	// failurePolicy: Fail with the webhook down: a ruled pod is refused.
	_, err = client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("while-down"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "inject.restart-supervisor.dev") {
		t.Fatalf("a ruled pod with the installed webhook down: %v, want refused by inject.restart-supervisor.dev", err)
	}

	// The CLI finds what the chart installed under its release name and
	// namespace, without --webhook-config or --agent-namespace.
	checkFindsTheInstall(t, dir, admin, name, agentNS)

	stdout, stderr, err = h.run2("uninstall", release, "--kubeconfig", admin, "--namespace", ns)
	t.Logf("helm uninstall:\n%s%s", stdout, stderr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("MutatingWebhookConfiguration after helm uninstall: %v", err)
	}
	for _, role := range []string{name, name + "-webhook-config", agent} {
		if _, err := client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole %s after helm uninstall: %v", role, err)
		}
	}
	p, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("after-uninstall"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a ruled pod after helm uninstall: %v", err)
	}
	if injected(p) {
		t.Error("a pod was injected after helm uninstall")
	}
}

// notIn lists every field of want that has another value, or none, in got:
// got may add fields (the API server's defaults), never drop or change one.
// A zero value (false, 0, "") and no field are the same: the API omits
// zero values of optional fields (readOnly: false).
func notIn(path string, want, got any) []string {
	if got == nil && (want == false || want == float64(0) || want == "") {
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: applied a map, stored %v", path, got)}
		}
		var diffs []string
		for _, k := range sortedKeys(w) {
			diffs = append(diffs, notIn(path+"."+k, w[k], g[k])...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: applied %v, stored %v", path, w, got)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, notIn(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: applied %v, stored %v", path, want, got)}
		}
		return nil
	}
}

// TestHelmInstallHostNetwork installs the chart's host-network variant (EKS
// with a custom CNI: webhook.hostNetwork, ports off the kubelet's) with
// `helm install -n hostnet` onto a real kube-apiserver, in a namespace at the
// privileged Pod Security level as docs/webhook.md asks, and checks what the
// API server stores: the host network, its DNS policy, and the ports in the
// flags, containerPorts and probes; then the built webhook, run with the
// installed Deployment's arguments as the installed ServiceAccount, admits
// and wraps a ruled pod through the installed configuration.
func TestHelmInstallHostNetwork(t *testing.T) {
	h := newHelm(t)
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	dir := t.TempDir()
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	const ns, name = "hostnet", "restart-injector"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := h.run2("install", name, chartDir(t), "--kubeconfig", admin, "--namespace", ns,
		"--set", "certificates.source=self", "--set", "webhook.hostNetwork=true",
		"--set", "webhook.port=10260", "--set", "webhook.healthPort=10261")
	t.Logf("helm install:\n%s%s", stdout, stderr)
	if err != nil {
		t.Fatal(err)
	}
	d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("stored hostNetwork %v, dnsPolicy %q", spec.HostNetwork, spec.DNSPolicy)
	}
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--listen=:10260") || !strings.Contains(args, "--health-listen=:10261") {
		t.Errorf("stored args %s", args)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["https"] != 10260 || ports["health"] != 10261 {
		t.Errorf("stored containerPorts %v", ports)
	}
	// A pod of the template, as the ReplicaSet controller creates it: the
	// API server makes a host-network pod's containerPorts its host ports,
	// by which the scheduler keeps two replicas off one node.
	replica := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "replica", Namespace: ns, Labels: d.Spec.Template.Labels},
		Spec: *d.Spec.Template.Spec.DeepCopy()}
	got, err := client.CoreV1().Pods(ns).Create(ctx, replica, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a pod of the Deployment's template in namespace %s: %v", ns, err)
	}
	for _, p := range got.Spec.Containers[0].Ports {
		if p.HostPort != p.ContainerPort {
			t.Errorf("port %s of the pod: hostPort %d, containerPort %d", p.Name, p.HostPort, p.ContainerPort)
		}
	}
	// Why the namespace must be privileged: baseline, and so restricted,
	// refuse the host network.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "baseline",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replica.Namespace = "baseline"
	if _, err := client.CoreV1().Pods("baseline").Create(ctx, replica, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "hostNetwork") {
		t.Errorf("a host-network webhook pod at the baseline level: %v, want refused for hostNetwork", err)
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %+v does not use the health port", p)
		}
	}
	svc, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "https" {
		t.Errorf("Service %v: %+v", err, svc.Spec.Ports)
	}
	serveAsInstalled(t, env, client, dir, ns, name, nil)
}

// checkFindsTheInstall runs `restart-injector check -f` on a ruled pod and
// `status -A` with no flag naming the install: check must report the
// webhook configuration config and the agents' namespace agentNS it found
// (before, it looked for deploy/'s names and found neither), and status no
// doubt about the namespace.
func checkFindsTheInstall(t *testing.T, dir, kubeconfig, config, agentNS string) {
	t.Helper()
	bin := buildInjector(t, dir)
	pod := filepath.Join(dir, "check-pod.yaml")
	if err := os.WriteFile(pod, []byte(`apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: apps}
spec:
  restartPolicy: Never
  containers:
  - name: trainer
    image: busybox
    command: [sh, -c, exit 42]
    restartPolicy: Never
    restartPolicyRules:
    - action: Restart
      exitCodes: {operator: In, values: [42]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(bin, "check", "--kubeconfig", kubeconfig, "-f", pod).CombinedOutput()
	for _, want := range []string{
		"MutatingWebhookConfiguration " + config + " has webhook inject.restart-supervisor.dev",
		"agent-namespace     namespace " + agentNS + " (found by its ClusterRoleBinding)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "MutatingWebhookConfiguration restart-injector not found") {
		t.Errorf("check looked for deploy/'s name, not the install's:\n%s", out)
	}
	cmd := exec.Command(bin, "status", "--kubeconfig", kubeconfig, "-A")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil || strings.Contains(stderr.String(), "node agent:") {
		t.Errorf("status -A: %v; stderr %q, want no doubt about the agents' namespace", err, stderr.String())
	}
}
