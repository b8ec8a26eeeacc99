package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// KueueQueue is the LocalQueue (in the default namespace) that the
// harness's Kueue makes: a JobSet labelled kueue.x-k8s.io/queue-name with it
// is admitted by Kueue. Its ClusterQueue, of the same name, has room for
// every job the harness runs, so that admission waits for nothing.
const KueueQueue = "training"

// KueueQueueLabel is the label a job names its LocalQueue with.
const KueueQueueLabel = "kueue.x-k8s.io/queue-name"

// WorkloadResource is Kueue's Workload, the object that holds a job's
// admission and its eviction counts (v1beta2, the storage version of
// v0.17.0).
var WorkloadResource = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// KueueOptions are the settings of Kueue's Configuration the harness
// varies.
type KueueOptions struct {
	// Dir is hack/kueue.sh's directory: the controller, its CRDs and its
	// webhook configurations.
	Dir string
	// PodsReadyTimeout and RecoveryTimeout are waitForPodsReady's timeout
	// (admission to every pod Ready) and recoveryTimeout (a PodsReady that
	// turned false back to true), after which Kueue evicts the workload:
	// it suspends the job, which deletes its pods, and queues it again.
	PodsReadyTimeout, RecoveryTimeout time.Duration
	// RequeueBaseSeconds is requeuingStrategy.backoffBaseSeconds, the first
	// wait before an evicted workload is admitted again (Kueue's default
	// is 60).
	RequeueBaseSeconds int
}

// kueueFrameworks are the integrations the harness turns on: JobSet's (the
// job the rows run) and the Job's, which JobSet's integration needs for the
// Jobs it owns. Only their webhooks and Kueue's own are registered: the
// release's configuration lists every framework's, and an API server
// calling a path the controller does not serve fails every create of that
// kind.
var kueueFrameworks = []string{"batch/job", "jobset.x-k8s.io/jobset"}

// kueueWebhookPaths are the path fragments of the webhooks kept.
var kueueWebhookPaths = []string{"-kueue-x-k8s-io-", "-jobset-x-k8s-io-", "-batch-v1-job"}

// startKueue installs Kueue from o.Dir as the release installs it, with
// the changes startJobSet makes for a cluster without Services (webhooks at
// 127.0.0.1 with a CA made here, the controller on the host, no leader
// election, no metrics) and without its visibility server (an aggregated
// API the harness does not register); then one ResourceFlavor, one
// ClusterQueue and the LocalQueue KueueQueue. JobSet must be installed
// first: Kueue turns on its JobSet integration only if the CRD exists.
func (c *Cluster) startKueue(ctx context.Context, o KueueOptions) error {
	crds, err := filepath.Glob(filepath.Join(o.Dir, "crds", "kueue.x-k8s.io_*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no Kueue CRDs in %s/crds", o.Dir)
	}
	if err := c.installCRDs(ctx, crds...); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	srv, err := c.newLocalServer("kueue")
	if err != nil {
		return err
	}
	if err := placeKueueMetricsCerts(srv.certDir); err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:%d
waitForPodsReady:
  timeout: %s
  recoveryTimeout: %s
  blockAdmission: false
  requeuingStrategy:
    timestamp: Eviction
    backoffBaseSeconds: %d
integrations:
  frameworks: [%s]
`, srv.port, srv.certDir, srv.healthPort, o.PodsReadyTimeout, o.RecoveryTimeout, o.RequeueBaseSeconds, `"`+strings.Join(kueueFrameworks, `", "`)+`"`)
	configPath := c.path("kueue-config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	argv := []string{filepath.Join(o.Dir, "kueue"), "--kubeconfig", c.Kubeconfig, "--config", configPath,
		"--feature-gates", "VisibilityOnDemand=false"}
	if err := c.Start("kueue", argv, nil); err != nil {
		return err
	}
	err = c.waitFor(ctx, "kueue", 90*time.Second, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", srv.healthPort), nil)
		return expectOK(http.DefaultClient, req)
	})
	if err != nil {
		return err
	}
	if err := c.registerKueueWebhooks(ctx, filepath.Join(o.Dir, "webhooks.yaml"), fmt.Sprintf("https://127.0.0.1:%d", srv.port), srv.caPEM); err != nil {
		return err
	}
	return c.makeKueueQueue(ctx)
}

// kueueMetricsCerts is where Kueue v0.17.0 reads its metrics server's
// certificate when it does not manage its certificates itself, a path fixed
// in its main (cmd/kueue/main.go:206-218), which exits when the files are
// missing even with metrics off. In a cluster they are a mounted Secret;
// here the harness puts its serving pair there, and Down removes the
// directory by its marker (kueueHostMarker): the harness made it, and no
// other /etc/kueue is touched.
const (
	kueueHostDir     = "/etc/kueue"
	kueueHostMarker  = ".restart-supervisor-e2e"
	kueueMetricsCert = kueueHostDir + "/metrics/certs"
)

func placeKueueMetricsCerts(certDir string) error {
	if _, err := os.Stat(kueueHostDir); err == nil {
		if _, err := os.Stat(filepath.Join(kueueHostDir, kueueHostMarker)); err != nil {
			return fmt.Errorf("%s exists and was not made by this harness: Kueue would read its certificates there", kueueHostDir)
		}
	} else if err := os.MkdirAll(kueueHostDir, 0o755); err != nil {
		return err
	} else if err := os.WriteFile(filepath.Join(kueueHostDir, kueueHostMarker), nil, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(kueueMetricsCert, 0o700); err != nil {
		return err
	}
	for _, name := range []string{webhook.CertFile, webhook.KeyFile} {
		b, err := os.ReadFile(filepath.Join(certDir, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(kueueMetricsCert, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// removeKueueHostDir removes what placeKueueMetricsCerts made.
func removeKueueHostDir() error {
	if _, err := os.Stat(filepath.Join(kueueHostDir, kueueHostMarker)); err != nil {
		return nil
	}
	return os.RemoveAll(kueueHostDir)
}

// makeKueueQueue makes the ResourceFlavor, ClusterQueue and LocalQueue
// KueueQueue, and waits until the ClusterQueue is active.
func (c *Cluster) makeKueueQueue(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	gvr := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: resource}
	}
	objects := []struct {
		resource, namespace, doc string
	}{
		{"resourceflavors", "", `{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "node"}}`},
		{"clusterqueues", "", `{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "` + KueueQueue + `"},
		  "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"],
		    "flavors": [{"name": "node", "resources": [{"name": "cpu", "nominalQuota": "64"}, {"name": "memory", "nominalQuota": "256Gi"}]}]}]}}`},
		{"localqueues", "default", `{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "` + KueueQueue + `", "namespace": "default"},
		  "spec": {"clusterQueue": "` + KueueQueue + `"}}`},
	}
	for _, o := range objects {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(o.doc), &obj.Object); err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr(o.resource))
		if o.namespace != "" {
			ri = dyn.Resource(gvr(o.resource)).Namespace(o.namespace)
		}
		// Kueue's own webhooks admit these objects: retried until they
		// answer.
		err := c.waitFor(ctx, "kueue", 60*time.Second, func() error {
			_, err := ri.Create(ctx, &obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return c.waitFor(ctx, "kueue", 60*time.Second, func() error {
		cq, err := dyn.Resource(gvr("clusterqueues")).Get(ctx, KueueQueue, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(cq.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Active" && m["status"] == "True" {
				return nil
			}
		}
		return errors.New("ClusterQueue " + KueueQueue + " not active yet")
	})
}

// registerKueueWebhooks creates the release's webhook configurations, kept
// to the webhooks of kueueWebhookPaths, each pointed at base + its path.
func (c *Cluster) registerKueueWebhooks(ctx context.Context, path, base string, caPEM []byte) error {
	return c.registerWebhooks(ctx, path, "kueue-", func(cc *admissionv1.WebhookClientConfig, _ []admissionv1.RuleWithOperations, _ **metav1.LabelSelector) bool {
		if cc.Service == nil || cc.Service.Path == nil {
			return false
		}
		for _, p := range kueueWebhookPaths {
			if strings.Contains(*cc.Service.Path, p) {
				url := base + *cc.Service.Path
				*cc = admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
				return true
			}
		}
		return false
	})
}
