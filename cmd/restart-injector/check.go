package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentstatus"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

const checkUsage = `usage: restart-injector check [-n NAMESPACE] [POD | -f FILE] [flags]

Check the webhook and, given a pod (a live one, or a manifest in FILE: a
Pod, or any workload the injector knows, each of its pod templates checked),
whether it would be injected and why, whether the node agent runs on its
node and which path (native or supervised) it takes. One line per check:
ok, warn or fail, and for each warn and fail what to do (-o json: one JSON
array of them). Exit status: 0 no check failed, 1 a check failed, 2 usage
error.
`

// podWebhookName is the webhook of deploy/base/webhook.yaml that gets
// pods.
const podWebhookName = agentstatus.PodWebhookName

// maxCheckFile bounds -f: one Pod manifest.
const maxCheckFile = 1 << 20

// checkResult is one line of check.
type checkResult struct {
	status, name, msg, fix string
}

// checkedPod is one pod check looks at: a live pod, a Pod manifest, or a
// pod template of a workload (what names it: "Job trainer /spec/template").
type checkedPod struct {
	what string
	pod  *corev1.Pod
}

type checker struct {
	ctx     context.Context
	client  kubernetes.Interface
	out     io.Writer
	failed  bool
	timeout time.Duration
	// json collects the results (-o json) instead of printing lines;
	// object names the pod or template the next results are about.
	json    bool
	results []jsonResult
	object  string
	// warnings are the API server's, each once, reported at the end
	// rather than logged among the results.
	mu       sync.Mutex
	warnings []string
}

// jsonResult is one check in -o json.
type jsonResult struct {
	Status  string `json:"status"`
	Check   string `json:"check"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
	Object  string `json:"object,omitempty"`
}

// HandleWarningHeader keeps the API server's warnings (rest.WarningHandler)
// for the end of the report, where client-go would log them among it.
func (c *checker) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.warnings, text) && len(c.warnings) < 20 {
		c.warnings = append(c.warnings, text)
	}
}

// finish reports the API server's warnings and, with -o json, writes the
// results.
func (c *checker) finish() {
	c.object = ""
	c.mu.Lock()
	warnings := slices.Clone(c.warnings)
	c.mu.Unlock()
	for _, w := range warnings {
		c.report(checkResult{"warn", "api-warning", clipWarning(w), ""})
	}
	if c.json {
		if c.results == nil {
			c.results = []jsonResult{}
		}
		b, _ := json.MarshalIndent(c.results, "", "  ")
		fmt.Fprintln(c.out, string(b))
	}
}

func clipWarning(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

func (c *checker) report(r checkResult) {
	if r.status == "fail" {
		c.failed = true
	}
	if c.json {
		c.results = append(c.results, jsonResult{Status: r.status, Check: r.name, Message: r.msg, Fix: r.fix, Object: c.object})
		return
	}
	line := fmt.Sprintf("%-4s  %-18s  %s", r.status, r.name, r.msg)
	if r.fix != "" {
		line += "; fix: " + r.fix
	}
	fmt.Fprintln(c.out, line)
}

func runCheck(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("check")
	file := fs.StringP("filename", "f", "", "a manifest `FILE` (YAML or JSON, - for stdin) to check instead of a live pod: a Pod or any workload the injector knows")
	webhookConfig := fs.String("webhook-config", "", "`NAME` of the MutatingWebhookConfiguration (default: the one that holds webhook "+podWebhookName+", whatever the install named it)")
	agentNamespace := fs.String("agent-namespace", "", "`NAMESPACE` of the node agent's pods (default: the one its ClusterRoleBinding names, else "+agentapi.AgentNamespace+")")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of each check's calls")
	webhookNamespace := fs.String("webhook-namespace", "restart-supervisor", "`NAMESPACE` the webhook runs in, which its namespaceSelector leaves out: the --native=auto checks dry-run their probe pods there, as the webhook does (default: the webhook Service's namespace, else this)")
	output := fs.StringP("output", "o", "", "`FORMAT` of the report: json, or the lines (default)")
	conn := bindKubeConnection(fs, "0")
	if code, ok := parseFlags(fs, "check", args, checkUsage, stderr); !ok {
		return code
	}
	pods, rest, _ := positionalsAndRest(fs)
	namespace := &conn.overrides.Context.Namespace
	var err error
	if len(pods)+len(rest) > 1 || len(pods) == 1 && *file != "" {
		fmt.Fprintln(stderr, "restart-injector check: give one POD or -f FILE, not both or more")
		return exitUsage
	}
	if *output != "" && *output != "json" {
		fmt.Fprintf(stderr, "restart-injector check: -o %q: want json, or no -o for the lines\n", *output)
		return exitUsage
	}
	var checked []checkedPod
	if *file != "" {
		if checked, err = readPodsFile(*file, stdin); err != nil {
			fmt.Fprintf(stderr, "restart-injector check: -f %s: %v\n", *file, err)
			return exitUsage
		}
	}
	var pod *corev1.Pod
	if len(checked) > 0 {
		pod = checked[0].pod
	}
	cc := conn.clientConfig()
	if *namespace == "" && pod != nil && pod.Namespace != "" {
		*namespace = pod.Namespace
	}
	if *namespace == "" {
		if *namespace, _, err = cc.Namespace(); err != nil {
			fmt.Fprintf(stderr, "restart-injector check: kubeconfig: %v\n", err)
			return exitFailure
		}
	}
	c := &checker{ctx: ctx, out: stdout, json: *output == "json"}
	cfg, err := cc.ClientConfig()
	var client kubernetes.Interface
	if err == nil {
		cfg.WarningHandler = c
		client, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector check: kubeconfig: %v\n", err)
		return exitFailure
	}
	c.client, c.timeout = client, *timeout
	live := false
	if len(pods) == 1 {
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		pod, err = client.CoreV1().Pods(*namespace).Get(cctx, pods[0], metav1.GetOptions{})
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector check: pod %s/%s: %v\n", *namespace, pods[0], err)
			return exitFailure
		}
		live = true
		checked = []checkedPod{{pod: pod}}
	}
	for _, cp := range checked {
		cp.pod.Namespace = *namespace
	}
	if *webhookConfig == "" {
		*webhookConfig = c.findWebhookConfig()
	}
	var agentNote *checkResult
	if *agentNamespace == "" {
		fctx, cancel := context.WithTimeout(ctx, c.timeout)
		ns, note, found := agentstatus.AgentNamespaceFor(fctx, client)
		cancel()
		*agentNamespace = ns
		agentNote = &checkResult{"ok", "agent-namespace", note, ""}
		if found != 1 {
			agentNote.status, agentNote.fix = "warn", "name it with --agent-namespace"
		}
	}
	wh := c.checkWebhook(*webhookConfig)
	if wh != nil {
		c.checkCABundle(wh)
		if svc := wh.ClientConfig.Service; svc != nil {
			c.checkWebhookPods(svc.Namespace, svc.Name)
		}
	}
	probeNamespace := *webhookNamespace
	if wh != nil && wh.ClientConfig.Service != nil {
		probeNamespace = wh.ClientConfig.Service.Namespace
	}
	if len(checked) == 0 {
		c.checkAdmission(wh, nil, *namespace)
	}
	for i, cp := range checked {
		c.object = cp.what
		if cp.what != "" && !c.json {
			fmt.Fprintf(c.out, "--    %s\n", cp.what)
		}
		// An injected live pod would be wrapped again by its own copy:
		// the dry run then takes the probe pod, and "injected" reports
		// the pod.
		admitted := cp.pod
		if _, ok := podAnnotation(cp.pod, contract.AnnotationStatus); live && ok {
			admitted = nil
		}
		c.checkAdmission(wh, admitted, *namespace)
		hasRules := c.checkSelection(wh, cp.pod)
		if live {
			c.checkInjected(cp.pod)
		}
		if i > 0 {
			agentNote = nil // said once
		}
		c.checkNodeAgent(cp.pod, *agentNamespace, agentNote)
		if hasRules {
			c.checkPath(cp.pod, probeNamespace)
		}
	}
	c.finish()
	if c.failed {
		return exitFailure
	}
	return exitOK
}

// readPodsFile reads one manifest, at most maxCheckFile bytes: a v1 Pod,
// or an object of a kind the injector knows, whose pod templates are
// checked each as a pod of the object's namespace (injector.Templates).
func readPodsFile(name string, stdin io.Reader) ([]checkedPod, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("not a regular file")
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxCheckFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCheckFile {
		return nil, fmt.Errorf("larger than %d bytes", maxCheckFile)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GetKind() == "Pod" && u.GetAPIVersion() == "v1" {
		var pod corev1.Pod
		if err := yaml.Unmarshal(b, &pod); err != nil {
			return nil, err
		}
		return []checkedPod{{pod: &pod}}, nil
	}
	if u.GetKind() == "" || u.GetAPIVersion() == "" {
		return nil, fmt.Errorf("want one object with apiVersion and kind")
	}
	templates, err := injector.Templates(obj)
	if err != nil {
		return nil, err
	}
	if len(templates) == 0 {
		return nil, fmt.Errorf("%s %s %q has no pod template the injector knows", u.GetAPIVersion(), u.GetKind(), u.GetName())
	}
	out := make([]checkedPod, 0, len(templates))
	for _, t := range templates {
		raw, err := json.Marshal(t.Object)
		if err != nil {
			return nil, err
		}
		var tmpl corev1.PodTemplateSpec
		if err := json.Unmarshal(raw, &tmpl); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Pointer, err)
		}
		pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		pod.Name = cmp.Or(pod.Name, u.GetName())
		pod.Namespace = u.GetNamespace()
		out = append(out, checkedPod{what: fmt.Sprintf("%s %s %s", u.GetKind(), u.GetName(), t.Pointer), pod: pod})
	}
	return out, nil
}

// checkWebhook finds the configuration and its pod webhook.
func (c *checker) checkWebhook(name string) *admissionregistrationv1.MutatingWebhook {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	mwc, err := c.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.report(checkResult{"fail", "webhook-config", fmt.Sprintf("MutatingWebhookConfiguration %s not found", name),
			"install the webhook (kubectl apply -k deploy/, or helm install restart-injector charts/restart-injector), or name yours with --webhook-config"})
		return nil
	}
	if err != nil {
		c.report(checkResult{"fail", "webhook-config", fmt.Sprintf("get MutatingWebhookConfiguration %s: %v", name, err), "check the kubeconfig and that it may get mutatingwebhookconfigurations"})
		return nil
	}
	for i := range mwc.Webhooks {
		if mwc.Webhooks[i].Name == podWebhookName {
			c.report(checkResult{"ok", "webhook-config", fmt.Sprintf("MutatingWebhookConfiguration %s has webhook %s (failurePolicy %s)", name, podWebhookName, ptrString(mwc.Webhooks[i].FailurePolicy)), ""})
			return &mwc.Webhooks[i]
		}
	}
	c.report(checkResult{"fail", "webhook-config", fmt.Sprintf("MutatingWebhookConfiguration %s has no webhook %s", name, podWebhookName), "apply deploy/base/webhook.yaml again"})
	return nil
}

// webhookPods is the command that lists the webhook's pods: in its
// Service's namespace, or, for a url webhook, wherever they run.
func webhookPods(wh *admissionregistrationv1.MutatingWebhook) string {
	if wh != nil && wh.ClientConfig.Service != nil {
		return "kubectl -n " + wh.ClientConfig.Service.Namespace + " get pods -l app.kubernetes.io/name=restart-injector"
	}
	return "kubectl get pods -A -l app.kubernetes.io/name=restart-injector"
}

func ptrString[T ~string](p *T) string {
	if p == nil {
		return "unset"
	}
	return string(*p)
}

// checkCABundle verifies the certificate the webhook serves with the
// caBundle: dialled directly for a url, which is what the API server
// dials; a Service is reached by the API server alone (the dry run that
// follows tests that path), so here its endpoints are checked.
func (c *checker) checkCABundle(wh *admissionregistrationv1.MutatingWebhook) {
	pool := x509.NewCertPool()
	var subjects []string
	for rest := wh.ClientConfig.CABundle; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if cert, err := x509.ParseCertificate(blk.Bytes); err == nil {
			pool.AddCert(cert)
			subjects = append(subjects, cert.Subject.CommonName)
		}
	}
	if len(subjects) == 0 {
		c.report(checkResult{"fail", "ca-bundle", fmt.Sprintf("webhook %s has no CA certificate in its caBundle", wh.Name),
			"let cert-manager's cainjector fill it (deploy/) or run the webhook with --cert-mode=self (deploy/self-managed)"})
		return
	}
	if u := wh.ClientConfig.URL; u != nil {
		pu, err := url.Parse(*u)
		if err != nil || pu.Host == "" {
			c.report(checkResult{"fail", "ca-bundle", fmt.Sprintf("webhook url %q: not a URL", *u), "fix clientConfig.url"})
			return
		}
		host := pu.Host
		if pu.Port() == "" {
			host = net.JoinHostPort(pu.Hostname(), "443")
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: c.timeout}, Config: &tls.Config{RootCAs: pool, ServerName: pu.Hostname()}}
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		conn, err := d.DialContext(ctx, "tcp", host)
		cancel()
		var unknown x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		var hostErr x509.HostnameError
		switch {
		case errors.As(err, &unknown):
			c.report(checkResult{"fail", "ca-bundle", fmt.Sprintf("the caBundle (%s) does not verify the certificate served at %s: %v", strings.Join(subjects, ", "), host, err),
				"the caBundle is stale: let cert-manager's cainjector or the self-managed webhook write the current CA, or restart the webhook on the certificate the caBundle signs"})
		case errors.As(err, &invalid), errors.As(err, &hostErr):
			c.report(checkResult{"fail", "ca-bundle", fmt.Sprintf("the certificate served at %s: %v", host, err), "renew the webhook's serving certificate"})
		case err != nil:
			c.report(checkResult{"fail", "ca-bundle", fmt.Sprintf("no TLS connection to the webhook at %s: %v", host, err), "is the webhook running and listening there? (" + webhookPods(nil) + ")"})
		default:
			leaf := conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
			conn.Close()
			left := time.Until(leaf.NotAfter)
			status, fix := "ok", ""
			if left < 7*24*time.Hour {
				status, fix = "warn", "renew the serving certificate"
			}
			c.report(checkResult{status, "ca-bundle", fmt.Sprintf("the caBundle (%s) verifies the certificate served at %s (expires in %d days)", strings.Join(subjects, ", "), host, int(left.Hours()/24)), fix})
		}
		return
	}
	svc := wh.ClientConfig.Service
	if svc == nil {
		c.report(checkResult{"fail", "ca-bundle", "clientConfig has neither url nor service", "apply deploy/base/webhook.yaml again"})
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	ep, err := c.client.CoreV1().Endpoints(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	ready := 0
	if err == nil {
		for _, s := range ep.Subsets {
			ready += len(s.Addresses)
		}
	}
	switch {
	case err != nil:
		c.report(checkResult{"fail", "ca-bundle", fmt.Sprintf("Service %s/%s: %v", svc.Namespace, svc.Name, err), "install the webhook's Service and Deployment (deploy/)"})
	case ready == 0:
		c.report(checkResult{"fail", "ca-bundle", fmt.Sprintf("Service %s/%s has no ready endpoints", svc.Namespace, svc.Name), fmt.Sprintf("kubectl -n %s get pods; kubectl -n %s logs deploy/restart-injector", svc.Namespace, svc.Namespace)})
	default:
		c.report(checkResult{"ok", "ca-bundle", fmt.Sprintf("caBundle holds %s; Service %s/%s has %d ready endpoints (the API server's dry run below verifies the served certificate)", strings.Join(subjects, ", "), svc.Namespace, svc.Name, ready), ""})
	}
}

// maxWebhookPods bounds the webhook's pods check reads and names.
const maxWebhookPods = 50

// checkWebhookPods reports the webhook's own pods, the ones its Service
// selects: how many are ready and, for each that is not, why, from its
// containers' state (ImagePullBackOff with the image, CrashLoopBackOff
// with the last exit, unscheduled): the first failure a new install shows.
func (c *checker) checkWebhookPods(namespace, service string) {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	svc, err := c.client.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil || len(svc.Spec.Selector) == 0 {
		return // said by the endpoints' line above
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector).String()
	pods, err := c.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: maxWebhookPods})
	if err != nil {
		c.report(checkResult{"warn", "webhook-pods", fmt.Sprintf("list the webhook's pods (%s in %s): %v", sel, namespace, err), "the check needs list on pods of " + namespace})
		return
	}
	if len(pods.Items) == 0 {
		c.report(checkResult{"fail", "webhook-pods", fmt.Sprintf("no pod of the webhook runs: Service %s/%s selects none (%s)", namespace, service, sel),
			fmt.Sprintf("kubectl -n %s describe deployment %s; its events say why it has no pods (a quota, a Pod Security level, a missing ServiceAccount)", namespace, service)})
		return
	}
	ready, why := 0, []string{}
	for _, p := range pods.Items {
		if podReady(&p) {
			ready++
			continue
		}
		why = append(why, p.Name+": "+notReadyReason(&p))
	}
	msg := fmt.Sprintf("%d of %d pods of the webhook ready", ready, len(pods.Items))
	switch {
	case len(why) == 0:
		c.report(checkResult{"ok", "webhook-pods", msg, ""})
	case ready == 0:
		c.report(checkResult{"fail", "webhook-pods", msg + "; " + strings.Join(why, "; "), "kubectl -n " + namespace + " describe pod " + pods.Items[0].Name})
	default:
		c.report(checkResult{"warn", "webhook-pods", msg + "; " + strings.Join(why, "; "), "kubectl -n " + namespace + " describe pods -l " + sel})
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// notReadyReason says why a pod is not ready, from its containers' state.
func notReadyReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			r := cs.State.Waiting.Reason
			if strings.Contains(r, "Image") {
				r += " (image " + cs.Image + ")"
			}
			if m := cs.State.Waiting.Message; m != "" {
				r += ": " + clipWarning(m)
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				r += fmt.Sprintf(", last exit %d %s", t.ExitCode, t.Reason)
			}
			return r
		case cs.State.Terminated != nil:
			return fmt.Sprintf("exited %d %s", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
		}
	}
	if p.Spec.NodeName == "" {
		return "not scheduled"
	}
	return "not ready (" + string(p.Status.Phase) + ")"
}

// checkAdmission asks the API server to create pod (or a probe pod with
// rules) with dryRun=All: the API server itself evaluates the selectors
// and matchConditions, dials the webhook with the caBundle and applies
// its patch, storing nothing.
func (c *checker) checkAdmission(wh *admissionregistrationv1.MutatingWebhook, pod *corev1.Pod, namespace string) {
	probe := pod == nil
	var p *corev1.Pod
	if probe {
		p = webhook.NativeProbePod(namespace)
		p.Spec.Containers[0].Command = []string{"/pause"}
	} else {
		p = pod.DeepCopy()
	}
	p.ObjectMeta = metav1.ObjectMeta{GenerateName: "restart-injector-check-", Namespace: namespace, Labels: p.Labels, Annotations: p.Annotations}
	delete(p.Annotations, contract.AnnotationStatus)
	p.Spec.NodeName = ""
	p.Status = corev1.PodStatus{}
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout+10*time.Second)
	defer cancel()
	got, err := c.client.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	what := "a probe pod with restart rules"
	if !probe {
		what = "pod " + pod.Name
	}
	if err != nil {
		msg := err.Error()
		if len(msg) > 400 {
			msg = msg[:400] + "..."
		}
		fix := "read the message: the API server's answer"
		switch {
		case strings.Contains(msg, "x509"), strings.Contains(msg, "certificate"):
			fix = "the caBundle does not verify the webhook's certificate: let cert-manager's cainjector or the self-managed webhook rewrite it"
		case strings.Contains(msg, "failed calling webhook"):
			fix = "the webhook is down or unreachable (failurePolicy Fail refuses pods with rules meanwhile): " + webhookPods(wh)
		case strings.Contains(msg, "denied the request"):
			fix = "the webhook refused the pod: fix what the message names (restart-injector explain -f FILE shows the same checks offline)"
		case apierrors.IsForbidden(err):
			fix = "the check needs create on pods (a dry run stores nothing)"
		}
		c.report(checkResult{"fail", "admission", fmt.Sprintf("dry-run create of %s in %s: %s", what, namespace, msg), fix})
		return
	}
	if _, ok := got.Annotations[contract.AnnotationStatus]; ok {
		c.report(checkResult{"ok", "admission", fmt.Sprintf("a dry-run create of %s in %s comes back injected (the webhook answered through the API server)", what, namespace), ""})
		return
	}
	if wh == nil {
		c.report(checkResult{"warn", "admission", fmt.Sprintf("a dry-run create of %s in %s comes back as it went: no webhook answered", what, namespace), "install the webhook"})
		return
	}
	c.report(checkResult{"ok", "admission", fmt.Sprintf("a dry-run create of %s in %s is admitted unchanged (native path, or not selected: see below)", what, namespace), ""})
}

// checkSelection says why the webhook gets the pod or not: its rules, the
// namespace and object selectors, and whether the pod carries restart
// rules, which is what matchConditions test.
func (c *checker) checkSelection(wh *admissionregistrationv1.MutatingWebhook, pod *corev1.Pod) (hasRules bool) {
	all, err := injector.PodRules(pod, "spec", "pod "+pod.Name)
	var ruled []injector.ContainerRules
	for _, r := range all {
		if r.Ruled {
			ruled = append(ruled, r)
		}
	}
	_, wrapped := pod.Annotations[contract.AnnotationStatus]
	switch {
	case wrapped && err == nil && len(ruled) == 0:
		c.report(checkResult{"ok", "restart-rules", "the pod is injected: its rules are in " + contract.EnvConfig + " of the wrapped containers", ""})
	case err != nil:
		c.report(checkResult{"fail", "restart-rules", err.Error(), "fix the rules (restart-injector explain -f FILE)"})
	case len(ruled) == 0:
		c.report(checkResult{"fail", "restart-rules", "no container carries restart rules, so matchConditions keep the pod from the webhook", "add restartPolicy and restartPolicyRules to a container, or the annotation " + contract.AnnotationRules})
	default:
		var names []string
		for _, r := range ruled {
			names = append(names, r.Name)
		}
		c.report(checkResult{"ok", "restart-rules", fmt.Sprintf("containers %s carry restart rules (matchConditions send the pod to the webhook)", strings.Join(names, ", ")), ""})
	}
	hasRules = err == nil && (len(ruled) > 0 || wrapped)
	if wh == nil {
		return hasRules
	}
	covers := false
	for _, r := range wh.Rules {
		for _, res := range r.Resources {
			if res == "pods" || res == "*" {
				for _, op := range r.Operations {
					covers = covers || op == admissionregistrationv1.Create || op == admissionregistrationv1.OperationAll
				}
			}
		}
	}
	if covers {
		c.report(checkResult{"ok", "webhook-rules", "the webhook's rules cover CREATE of pods", ""})
	} else {
		c.report(checkResult{"fail", "webhook-rules", "the webhook's rules do not cover CREATE of pods", "apply deploy/base/webhook.yaml again"})
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	if sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector); err != nil {
		c.report(checkResult{"fail", "namespace-selector", err.Error(), "fix the webhook's namespaceSelector"})
	} else if ns, err := c.client.CoreV1().Namespaces().Get(ctx, pod.Namespace, metav1.GetOptions{}); err != nil {
		c.report(checkResult{"warn", "namespace-selector", fmt.Sprintf("namespace %s: %v", pod.Namespace, err), "the check needs get on namespaces"})
	} else if sel.Matches(labels.Set(ns.Labels)) {
		c.report(checkResult{"ok", "namespace-selector", fmt.Sprintf("namespace %s matches %q", pod.Namespace, selString(sel)), ""})
	} else {
		c.report(checkResult{"fail", "namespace-selector", fmt.Sprintf("namespace %s does not match %q: its pods are never sent to the webhook", pod.Namespace, selString(sel)), "run the pod in another namespace, or widen the namespaceSelector (Helm: namespaceSelector)"})
	}
	if sel, err := metav1.LabelSelectorAsSelector(wh.ObjectSelector); err != nil {
		c.report(checkResult{"fail", "object-selector", err.Error(), "fix the webhook's objectSelector"})
	} else if sel.Matches(labels.Set(pod.Labels)) {
		c.report(checkResult{"ok", "object-selector", fmt.Sprintf("the pod's labels match %q", selString(sel)), ""})
	} else {
		c.report(checkResult{"fail", "object-selector", fmt.Sprintf("the pod's labels do not match %q", selString(sel)), "add the labels the objectSelector asks for"})
	}
	return hasRules
}

func selString(s labels.Selector) string {
	if s.Empty() {
		return "everything"
	}
	return s.String()
}

// checkInjected reports whether a live pod was injected when it was
// created.
func (c *checker) checkInjected(pod *corev1.Pod) {
	if v, ok := pod.Annotations[contract.AnnotationStatus]; ok {
		c.report(checkResult{"ok", "injected", fmt.Sprintf("pod %s was injected at creation (%s: %s)", pod.Name, contract.AnnotationStatus, v), ""})
		return
	}
	c.report(checkResult{"warn", "injected", fmt.Sprintf("pod %s runs without the supervisor (no %s): fine on the native path, else created before the webhook", pod.Name, contract.AnnotationStatus),
		"if the path below is supervised, delete the pod so that its controller creates it again through the webhook"})
}

// findWebhookConfig returns the name of the MutatingWebhookConfiguration
// that holds the pod webhook, whatever the install named it; the first of
// several, with a warning; "restart-injector" (deploy/'s) when none is
// found or the list is refused, which checkWebhook then reports.
func (c *checker) findWebhookConfig() string {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	const fallback = "restart-injector"
	found, err := agentstatus.FindWebhookConfigs(ctx, c.client)
	switch {
	case err != nil:
		c.report(checkResult{"warn", "webhook-config", fmt.Sprintf("%v; looking for %s", err, fallback), "the check needs list on mutatingwebhookconfigurations, or --webhook-config"})
		return fallback
	case len(found) == 0:
		return fallback
	case len(found) > 1:
		var names []string
		for _, f := range found {
			names = append(names, f.Name)
		}
		c.report(checkResult{"warn", "webhook-config", fmt.Sprintf("%d MutatingWebhookConfigurations hold webhook %s (%s): two installs inject every pod twice; checking %s", len(found), podWebhookName, strings.Join(names, ", "), found[0].Name),
			"remove all but one install, or name one with --webhook-config"})
	}
	return found[0].Name
}

// checkNodeAgent reports how the agents' namespace was found (note; nil
// when given) and whether the node agent runs on the pod's node.
func (c *checker) checkNodeAgent(pod *corev1.Pod, agentNamespace string, note *checkResult) {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	if note != nil {
		c.report(*note)
	}
	agents, err := agentstatus.AgentNodes(ctx, c.client, agentNamespace)
	switch {
	case err != nil:
		c.report(checkResult{"warn", "node-agent", err.Error(), "the check needs list on pods of " + agentNamespace})
	case pod.Spec.NodeName == "" && len(agents) == 0:
		c.report(checkResult{"warn", "node-agent", "no node runs the node agent: no Events, metrics or kubectl restarts for in-place restarts", "install deploy/components/node-agent (optional)"})
	case pod.Spec.NodeName == "":
		c.report(checkResult{"ok", "node-agent", fmt.Sprintf("the pod is not scheduled yet; nodes that run the node agent: %d", len(agents)), ""})
	case agents[pod.Spec.NodeName]:
		published, err := agentapi.AgentKeyPublished(ctx, c.client, agentNamespace, pod.Spec.NodeName)
		switch {
		case err != nil:
			c.report(checkResult{"warn", "node-agent", err.Error(), "the check needs get on configmaps of " + agentNamespace})
		case !published:
			c.report(checkResult{"warn", "node-agent", fmt.Sprintf("node %s runs the node agent, but it published no Event-signing key: restart-injector status shows none of its Events", pod.Spec.NodeName),
				"the agent needs get, create and update on configmaps in " + agentNamespace + " (the Role of deploy/components/node-agent); its log names the error"})
		default:
			c.report(checkResult{"ok", "node-agent", fmt.Sprintf("node %s runs the node agent, its Event-signing key published", pod.Spec.NodeName), ""})
		}
	default:
		c.report(checkResult{"warn", "node-agent", fmt.Sprintf("node %s runs no node agent: its in-place restarts make no Events or metrics", pod.Spec.NodeName), "install deploy/components/node-agent, or check its DaemonSet's tolerations and nodeSelector"})
	}
}

// checkPath says which path the pod takes, by the decision of the
// webhook's --native=auto (webhook.NativeDetector.CheckAll, the same
// code): native when the API server keeps the fields and every kubelet
// honours the feature the pod relies on, supervised otherwise, and always
// supervised for rules in the annotation.
func (c *checker) checkPath(pod *corev1.Pod, probeNamespace string) {
	if _, ok := pod.Annotations[contract.AnnotationRules]; ok {
		c.report(checkResult{"ok", "path", "supervised: the rules are in the " + contract.AnnotationRules + " annotation, which only the supervisor reads", ""})
		return
	}
	if _, ok := pod.Annotations[contract.AnnotationStatus]; ok {
		c.report(checkResult{"ok", "path", "supervised: the pod was injected, restart-supervisor applies its rules", ""})
		return
	}
	// The probe pods go where the webhook sends its own: a namespace it
	// leaves out, so that they reach the API server's own handling of
	// the fields and not the webhook's rewrite.
	// Its log is the webhook's; check reports what it found, in its own lines.
	d := &webhook.NativeDetector{Client: c.client, Namespace: probeNamespace, Log: slog.New(slog.DiscardHandler)}
	rulesOK, allOK, why, err := d.CheckAll(c.ctx)
	if err != nil {
		c.report(checkResult{"warn", "path", fmt.Sprintf("cannot tell (the --native=auto checks failed: %v)", err), "the check needs create on pods (dry run) and list on nodes"})
		return
	}
	honoured := rulesOK
	if webhook.PodFeature(pod) == webhook.FeatureRestartAllContainers {
		honoured = allOK
	}
	node := ""
	if pod.Spec.NodeName != "" {
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		if n, err := c.client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{}); err == nil {
			node = fmt.Sprintf(" on node %s (kubelet %s)", n.Name, n.Status.NodeInfo.KubeletVersion)
		}
		cancel()
	}
	if honoured {
		c.report(checkResult{"ok", "path", fmt.Sprintf("native%s: the kubelet applies the rules, with --native=auto the webhook leaves the pod alone (%s)", node, why), ""})
		return
	}
	c.report(checkResult{"ok", "path", fmt.Sprintf("supervised%s: restart-supervisor applies the rules (%s)", node, why), ""})
}

func podAnnotation(pod *corev1.Pod, key string) (string, bool) {
	if pod == nil {
		return "", false
	}
	v, ok := pod.Annotations[key]
	return v, ok
}
