package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/restart-supervisor/restart-supervisor/nodeagent"
)

// runStatus is `restart-injector status [-n NS | -A] [POD]`, also run as
// the kubectl plugin `kubectl restarts` (a kubectl-restarts link to this
// binary: main dispatches on the name it was called by). It reads the
// structured values of the node agent's Events, never execs into a pod,
// and needs list on events and on pods of the agent's namespace.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: restart-injector status [-n NAMESPACE | -A] [POD]\n\nPrint the in-place restarts of supervised containers from the node agent's Events. Flags:")
		fs.PrintDefaults()
	}
	var namespace, kubeconfig, kubeContext, agentNamespace string
	var all bool
	fs.StringVar(&namespace, "n", "", "`NAMESPACE` (default: the kubeconfig context's)")
	fs.StringVar(&namespace, "namespace", "", "same as -n")
	fs.BoolVar(&all, "A", false, "every namespace")
	fs.BoolVar(&all, "all-namespaces", false, "same as -A")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "`FILE` (default: $KUBECONFIG, then ~/.kube/config, as kubectl)")
	fs.StringVar(&kubeContext, "context", "", "kubeconfig `CONTEXT` to use")
	fs.StringVar(&agentNamespace, "agent-namespace", nodeagent.AgentNamespace, "`NAMESPACE` of the node agent's pods: only Events from a node that runs one are shown")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 1 || all && (namespace != "" || fs.NArg() == 1) {
		fmt.Fprintln(stderr, "restart-injector status: give -A, or -n NAMESPACE and at most one POD")
		return exitUsage
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	if namespace == "" && !all {
		ns, _, err := cc.Namespace()
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector status: kubeconfig: %v\n", err)
			return exitFailure
		}
		namespace = ns
	}
	cfg, err := cc.ClientConfig()
	var client kubernetes.Interface
	if err == nil {
		client, err = kubernetes.NewForConfig(cfg)
	}
	var rows []nodeagent.StatusRow
	if err == nil {
		rows, err = nodeagent.ReadStatus(ctx, client, agentNamespace, namespace, fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector status: %v\n", err)
		return exitFailure
	}
	if len(rows) == 0 {
		fmt.Fprintln(stderr, "No in-place restarts recorded (the node agent's Events last as long as the API server keeps Events, 1 h by default).")
		return exitOK
	}
	if err := nodeagent.WriteStatus(stdout, rows, all, time.Now()); err != nil {
		fmt.Fprintf(stderr, "restart-injector status: %v\n", err)
		return exitFailure
	}
	return exitOK
}
