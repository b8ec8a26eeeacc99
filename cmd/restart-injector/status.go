package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentstatus"
)

const statusUsage = `usage: restart-injector status [POD] [-n NAMESPACE | -A] [-l SELECTOR] [-o wide|json|yaml|name] [-w]
       kubectl restarts ...   (the same, through a kubectl-restarts link)

Print the in-place restarts of supervised containers from the node agent's
Events, one line per container, then, where group restarts are on, one line
per group (its GroupRestart object: restarts, limit, last cause, how far its
round has come; table formats only, not watched). Flags and the pod may come in any order, as
with kubectl get. Exit status: 0 ok (also when there is nothing to show, and
when -w ends on an interrupt), 1 the API server or the kubeconfig failed,
2 usage error.
`

// runStatus is `restart-injector status`, also run as the kubectl plugin
// `kubectl restarts` (a kubectl-restarts link to this binary: main
// dispatches on the name it was called by). Its flags are pflag's, as
// kubectl's: -n NS and --namespace=NS, -A and --all-namespaces, -owide,
// flags after the pod. It reads the structured values of the node agent's
// Events, never execs into a pod, and needs list on events, list on pods
// of the agent's namespace, and with -l list and get on pods; list on
// grouprestarts for the group lines (without it, they are left out with a
// note), and on grouprestartreports for how far a round under way has
// come.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, conn := statusFlags()
	// client-go logs a failed response through klog on its own line; the
	// error status prints says it in one.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	if code, ok := parseFlags(fs, "status", args, statusUsage, stderr); !ok {
		return code
	}
	get := func(name string) string { v, _ := fs.GetString(name); return v }
	is := func(name string) bool { v, _ := fs.GetBool(name); return v }
	namespace, all, output := get("namespace"), is("all-namespaces"), get("output")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "restart-injector status: "+format+"\n", a...)
		return exitUsage
	}
	pod := ""
	switch fs.NArg() {
	case 0:
	case 1:
		// kubectl's TYPE/NAME form, for the one type status knows.
		pod = fs.Arg(0)
		if typ, name, ok := strings.Cut(pod, "/"); ok {
			if typ != "pod" && typ != "pods" && typ != "po" {
				return fail("%q: status lists pods only (POD or pod/POD)", fs.Arg(0))
			}
			pod = name
		}
		if pod == "" {
			return fail("empty pod name")
		}
	default:
		return fail("one POD at most, got %d: %s", fs.NArg(), strings.Join(fs.Args(), " "))
	}
	if all && namespace != "" {
		return fail("-A (every namespace) and -n %s exclude each other", namespace)
	}
	if all && pod != "" {
		return fail("a POD needs its namespace: -n NAMESPACE, not -A")
	}
	if output != "" && !slices.Contains(agentstatus.StatusFormats, output) {
		return fail("-o %q: want one of %s", output, strings.Join(agentstatus.StatusFormats, ", "))
	}
	timeout, err := time.ParseDuration(get("request-timeout"))
	if err != nil || timeout < 0 {
		return fail("--request-timeout %q: want a duration such as 30s, 0 for none", get("request-timeout"))
	}
	var selector labels.Selector
	if s := get("selector"); s != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			return fail("-l %q: %v", s, err)
		}
		selector = sel
	}

	cc := conn.clientConfig()
	if namespace == "" && !all {
		ns, _, err := cc.Namespace()
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector status: kubeconfig: %v\n", err)
			return exitFailure
		}
		namespace = ns
	}
	cfg, err := cc.ClientConfig()
	var client, watchClient kubernetes.Interface
	if err == nil && is("watch") {
		// A watch lasts until it is interrupted: no timeout and no
		// bound on its stream, whose events are decoded one at a time.
		wcfg := rest.CopyConfig(cfg)
		wcfg.Timeout = 0
		watchClient, err = kubernetes.NewForConfig(wcfg)
	}
	if err == nil {
		cfg = rest.CopyConfig(cfg)
		cfg.Timeout = timeout
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return boundedResponses{rt} })
		client, err = kubernetes.NewForConfig(cfg)
	}
	agentNamespace := get("agent-namespace")
	if agentNamespace == "" && client != nil {
		// Said only when there is a choice to doubt: several installs.
		// A user who may not list ClusterRoleBindings gets the default
		// without a word, as before.
		ns, note, found := agentstatus.AgentNamespaceFor(ctx, client)
		if found > 1 {
			fmt.Fprintln(stderr, "restart-injector status: node agent: "+note)
		}
		agentNamespace = ns
	}
	q := &agentstatus.StatusQuery{Client: client, AgentNamespace: agentNamespace, Namespace: namespace, Pod: pod, Selector: selector}
	var rows []agentstatus.StatusRow
	var rv string
	if err == nil {
		rows, rv, err = q.List(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector status: %v\n", err)
		return exitFailure
	}
	p := &agentstatus.StatusPrinter{Format: output, AllNamespaces: all, NoHeaders: is("no-headers")}
	if len(rows) == 0 && output != agentstatus.FormatJSON && output != agentstatus.FormatYAML {
		fmt.Fprintln(stderr, "No in-place restarts recorded (the node agent's Events last as long as the API server keeps Events, 1 h by default).")
	} else if err := p.Print(stdout, rows); err != nil {
		fmt.Fprintf(stderr, "restart-injector status: %v\n", err)
		return exitFailure
	}
	if output == agentstatus.FormatTable || output == agentstatus.FormatWide {
		groups, err := listGroups(ctx, cfg, client, namespace, pod, selector)
		switch {
		case apierrors.IsForbidden(err):
			fmt.Fprintf(stderr, "restart-injector status: group restarts not shown: %v\n", err)
		case err != nil:
			fmt.Fprintf(stderr, "restart-injector status: group restarts: %v\n", err)
			return exitFailure
		case len(groups) > 0:
			if err := p.PrintGroups(stdout, groups, listReports(ctx, cfg, groups)); err != nil {
				fmt.Fprintf(stderr, "restart-injector status: %v\n", err)
				return exitFailure
			}
		}
	}
	if !is("watch") {
		return exitOK
	}
	q.Client = watchClient
	if err := q.Watch(ctx, rv, func(r agentstatus.StatusRow) error { return p.PrintChange(stdout, r) }); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "restart-injector status: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// statusFlags are status's flags, kubectl's names and shorthands, and
// kubectl's connection flags.
func statusFlags() (*pflag.FlagSet, *kubeConnection) {
	fs := newFlagSet("status")
	fs.BoolP("all-namespaces", "A", false, "every namespace")
	fs.StringP("selector", "l", "", "only pods whose labels match this selector (kubectl's syntax: app=web,tier!=db)")
	fs.StringP("output", "o", "", "output format: wide (adds NODE and POD UID), json, yaml (a v1 List of ContainerRestarts), name (pod/NAME)")
	fs.BoolP("watch", "w", false, "after the listing, print every row that changes until interrupted")
	fs.Bool("no-headers", false, "print no header line")
	fs.String("agent-namespace", "", "namespace of the node agent's pods: only Events from a node that runs one are shown (default: the one its ClusterRoleBinding names, else "+agentapi.AgentNamespace+")")
	// --request-timeout: how long each request may take before status
	// gives up (not -w's watch); 30s, where kubectl has none, so that a
	// silent API server ends status with one line.
	return fs, bindKubeConnection(fs, "30s")
}

// listGroups reads the GroupRestart objects of namespace ("" with -A),
// only those of the pod's group, or of the selected pods' groups, when a
// pod or a selector is given. A cluster without the CRD (group restarts
// off) has none.
func listGroups(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, namespace, pod string, selector labels.Selector) ([]unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(agentapi.GroupResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if pod == "" && selector == nil {
		return list.Items, nil
	}
	var pods []corev1.Pod
	if pod != "" {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		pods = append(pods, *p)
	} else {
		l, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return nil, err
		}
		pods = l.Items
	}
	want := map[string]bool{}
	for i := range pods {
		if key, _, ok := agentapi.GroupOf(&pods[i]); ok {
			want[pods[i].Namespace+"/"+agentapi.GroupObjectName(key)] = true
		}
	}
	var out []unstructured.Unstructured
	for _, g := range list.Items {
		if want[g.GetNamespace()+"/"+g.GetName()] {
			out = append(out, g)
		}
	}
	return out, nil
}

// listReports reads the nodes' reports of each group whose round is under
// way, for how far it has come: one list per such group. A group whose
// reports cannot be read (no right to list them) is left out, and its
// line says what the group's object says.
func listReports(ctx context.Context, cfg *rest.Config, groups []unstructured.Unstructured) map[string][]agentapi.NodeReport {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	out := map[string][]agentapi.NodeReport{}
	for i := range groups {
		st := agentapi.GroupFromObject(&groups[i])
		if st.Generation == 0 || st.Done >= st.Generation {
			continue
		}
		list, err := dyn.Resource(agentapi.ReportResource).Namespace(st.Namespace).List(ctx,
			metav1.ListOptions{LabelSelector: agentapi.LabelReportOf + "=" + st.Name})
		if err != nil {
			continue
		}
		reps := []agentapi.NodeReport{}
		for j := range list.Items {
			reps = append(reps, agentapi.ReportFromObject(&list.Items[j]))
		}
		out[st.Namespace+"/"+st.Name] = reps
	}
	return out
}

// maxStatusResponse bounds each response of the API server that status
// reads whole: a page of 500 Events (status lists by pages) or the
// GroupRestart objects of a namespace are far below it, and a server, or
// anything answering in its place, that sends more is cut off instead of
// filling status's memory.
const maxStatusResponse = 64 << 20

// boundedResponses caps the body of every response at maxStatusResponse.
type boundedResponses struct{ rt http.RoundTripper }

// WrappedRoundTripper lets client-go reach the transport beneath, to
// cancel a request that times out.
func (b boundedResponses) WrappedRoundTripper() http.RoundTripper { return b.rt }

func (b boundedResponses) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.rt.RoundTrip(r)
	if err == nil {
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: maxStatusResponse}
	}
	return resp, err
}

type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("the API server's response exceeds %d bytes", maxStatusResponse)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
