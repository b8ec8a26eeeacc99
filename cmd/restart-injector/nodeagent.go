//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

func runNodeAgent(ctx context.Context, args []string, stderr io.Writer) int {
	fs := newFlagSet("node-agent")
	var c nodeagent.Config
	fs.StringVar(&c.NodeName, "node-name", os.Getenv("NODE_NAME"), "`NAME` of this node (default $NODE_NAME, from the downward API)")
	fs.StringVar(&c.PodsDir, "kubelet-pods-dir", "/var/lib/kubelet/pods", "`DIR`: the kubelet's pods directory")
	fs.DurationVar(&c.Interval, "interval", 2*time.Second, "time between two scans of the status documents")
	fs.StringVar(&c.MetricsListen, "metrics-listen", ":9464", "`ADDR` of the plain-HTTP /metrics and /healthz endpoint")
	fs.BoolVar(&c.Annotate, "annotate", false, "keep the annotation "+contract.AnnotationRestarts+" on each pod with its per-container in-place restarts (needs patch on pods)")
	fs.DurationVar(&c.AnnotateEvery, "annotate-every", 10*time.Second, "least time between two patches of one pod's annotation")
	fs.BoolVar(&c.Groups, "groups", false, "carry out group restarts (RestartGroup, docs/gang.md): needs the GroupRestart CRD, its rights and the pods directory writable (deploy/components/node-agent-groups)")
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = agentapi.AgentNamespace
	}
	fs.StringVar(&c.KeyNamespace, "namespace", ns, "`NAMESPACE` of the agent, where it publishes its Event-signing key for restart-injector status --agent-namespace (default $POD_NAMESPACE, else "+agentapi.AgentNamespace+")")
	kubeconfig := fs.String("kubeconfig", "", "`FILE` for API access outside a cluster (default: in-cluster config)")
	logFormat := fs.String("log-format", "json", "log `FORMAT`: json or text")
	if code, ok := parseFlags(fs, "node-agent", args, "usage: restart-injector node-agent [flags]\n\nRecord Events and serve metrics of the in-place restarts on this node.\n", stderr); !ok {
		return code
	}
	if err := errors.Join(
		nonEmpty(fs.NArg() == 0, fmt.Sprintf("unexpected argument %q", fs.Arg(0))),
		nonEmpty(c.NodeName != "", "--node-name or $NODE_NAME is required"),
		oneOf("log-format", *logFormat, "json", "text"),
	); err != nil {
		fmt.Fprintf(stderr, "restart-injector node-agent: %v\n", err)
		return exitUsage
	}
	c.Log = slog.New(slog.NewJSONHandler(stderr, nil))
	if *logFormat == "text" {
		c.Log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	var cfg *rest.Config
	var err error
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err == nil {
		cfg = nodeagent.ClientConfig(cfg)
		c.Client, err = kubernetes.NewForConfig(cfg)
	}
	if err == nil && c.Groups {
		c.Dynamic, err = dynamic.NewForConfig(cfg)
	}
	if err == nil {
		err = nodeagent.Run(ctx, c)
	}
	if err != nil {
		c.Log.Error("restart-injector node-agent failed", "err", err)
		return exitFailure
	}
	return exitOK
}

// nonEmpty is an error of msg unless ok.
func nonEmpty(ok bool, msg string) error {
	if ok {
		return nil
	}
	return errors.New(msg)
}
