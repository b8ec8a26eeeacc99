package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentstatus"
)

// versionInfo is `version -o json|yaml`, in the spirit of kubectl
// version's clientVersion: the stamped version, the toolchain and the
// platform; with --remote, what the cluster runs.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Compiler  string `json:"compiler"`
	Platform  string `json:"platform"`
	// Cluster is what version --remote found.
	Cluster *clusterVersions `json:"cluster,omitempty"`
}

// clusterVersions is what runs in the cluster: the API server's version,
// and the images of the webhook's pods and of the node agents' pods, each
// image once, in name order (two images: a rollout under way, or two
// installs).
type clusterVersions struct {
	Server        string   `json:"server"`
	WebhookImages []string `json:"webhookImages"`
	AgentImages   []string `json:"agentImages"`
}

const versionUsage = `usage: restart-injector version [-o json|yaml] [--remote [kubectl's connection flags]]   (also: restart-injector --version)

Print this binary's version; with --remote also the API server's and the
images of the webhook's pods (behind its MutatingWebhookConfiguration,
whatever the install named it) and of the node agents' pods, as kubectl
version prints the server's. Exit status: 0, 1 the cluster could not be
read, 2 usage error.
`

// runVersion prints the line `restart-supervisor version` prints, from the
// same stamped variable, so that the injector and the supervisor of one
// build can be matched; -o json or yaml prints the same as an object.
// `restart-injector --version` is the same command.
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version")
	output := fs.StringP("output", "o", "", "output `FORMAT`: json or yaml (default: lines)")
	withCluster := fs.Bool("remote", false, "also print the API server's version and the images the webhook and the node agents run")
	conn := bindKubeConnection(fs, "10s")
	if code, ok := parseFlags(fs, "version", args, versionUsage, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "restart-injector version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *output != "" && *output != "json" && *output != "yaml" {
		fmt.Fprintf(stderr, "restart-injector version: -o %q: want json or yaml\n", *output)
		return exitUsage
	}
	v := versionInfo{Version: contract.Version, GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if *withCluster {
		cfg, err := conn.clientConfig().ClientConfig()
		var client kubernetes.Interface
		if err == nil {
			// As status's: every response cut at maxStatusResponse.
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return boundedResponses{rt} })
			client, err = kubernetes.NewForConfig(cfg)
		}
		if err == nil {
			v.Cluster, err = readClusterVersions(ctx, client)
		}
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector version: %v\n", err)
			return exitFailure
		}
	}
	switch *output {
	case "":
		fmt.Fprintf(stdout, "restart-injector %s %s %s\n", v.Version, v.GoVersion, v.Platform)
		if c := v.Cluster; c != nil {
			fmt.Fprintf(stdout, "server: Kubernetes %s\n", c.Server)
			fmt.Fprintf(stdout, "webhook: %s\n", imagesOrNone(c.WebhookImages))
			fmt.Fprintf(stdout, "node agents: %s\n", imagesOrNone(c.AgentImages))
		}
	case "json":
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	case "yaml":
		b, _ := yaml.Marshal(v)
		fmt.Fprintf(stdout, "%s", b)
	}
	return exitOK
}

func imagesOrNone(images []string) string {
	if len(images) == 0 {
		return "none found"
	}
	return strings.Join(images, ", ")
}

// readClusterVersions (version --remote) asks the API server its version, and reads the
// images of the webhook's pods (the Service of each configuration that
// holds the pod webhook) and of the agents' pods (their namespace as
// status finds it). The API server's answer is needed; the pods are
// "none found" where the install has none or they cannot be listed.
func readClusterVersions(ctx context.Context, client kubernetes.Interface) (*clusterVersions, error) {
	info, err := client.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("the API server's version: %w", err)
	}
	c := &clusterVersions{Server: info.GitVersion, WebhookImages: []string{}, AgentImages: []string{}}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	podImages := func(namespace, selector string) []string {
		pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: maxWebhookPods})
		if err != nil {
			return nil
		}
		var images []string
		for _, p := range pods.Items {
			for _, ctr := range p.Spec.Containers {
				images = append(images, ctr.Image)
			}
		}
		slices.Sort(images)
		return slices.Compact(images)
	}
	if configs, err := agentstatus.FindWebhookConfigs(ctx, client); err == nil {
		for _, cfg := range configs {
			for _, wh := range cfg.Webhooks {
				svc := wh.ClientConfig.Service
				if wh.Name != podWebhookName || svc == nil {
					continue
				}
				s, err := client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
				if err != nil || len(s.Spec.Selector) == 0 {
					continue
				}
				c.WebhookImages = append(c.WebhookImages, podImages(svc.Namespace, labels.SelectorFromSet(s.Spec.Selector).String())...)
			}
		}
	}
	ns, _, _ := agentstatus.AgentNamespaceFor(ctx, client)
	c.AgentImages = append(c.AgentImages, podImages(ns, agentapi.AgentLabel)...)
	slices.Sort(c.WebhookImages)
	c.WebhookImages = slices.Compact(c.WebhookImages)
	return c, nil
}
