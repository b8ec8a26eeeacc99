package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jobSetPodLabel is on every pod a JobSet makes; the release's kustomize
// patches scope JobSet's pod webhooks to it (config/components/webhook/
// patches, v0.12.0), so that no other pod depends on JobSet's webhook.
const jobSetPodLabel = "jobset.sigs.k8s.io/jobset-name"

// startJobSet installs JobSet from dir (hack/jobset.sh: the controller
// binary, its CRD and its webhook configurations) as the release installs
// it, with three changes for a cluster without Services or DNS: the
// webhooks are called at 127.0.0.1 with a CA made here (the release uses
// cert-manager or its own rotator and a Service), and the controller runs
// on the host without leader election or metrics.
func (c *Cluster) startJobSet(ctx context.Context, dir string) error {
	if err := c.installCRDs(ctx, filepath.Join(dir, "crds", "jobset.x-k8s.io_jobsets.yaml")); err != nil {
		return err
	}

	srv, err := c.newLocalServer("jobset")
	if err != nil {
		return err
	}
	certDir, port, health := srv.certDir, srv.port, srv.healthPort
	config := fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
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
`, port, certDir, health)
	configPath := c.path("jobset-config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	if err := c.Start("jobset", []string{filepath.Join(dir, "jobset"), "--kubeconfig", c.Kubeconfig, "--config", configPath}, nil); err != nil {
		return err
	}
	err = c.waitFor(ctx, "jobset", 60*time.Second, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", health), nil)
		return expectOK(http.DefaultClient, req)
	})
	if err != nil {
		return err
	}
	return c.registerJobSetWebhooks(ctx, filepath.Join(dir, "webhooks.yaml"), fmt.Sprintf("https://127.0.0.1:%d", port), srv.caPEM)
}

// registerJobSetWebhooks creates the release's webhook configurations with
// each clientConfig pointed at base + the release's path, and the pod
// webhooks scoped to JobSet's pods, as the release's kustomize patches do.
func (c *Cluster) registerJobSetWebhooks(ctx context.Context, path, base string, caPEM []byte) error {
	return c.registerWebhooks(ctx, path, "jobset-", func(cc *admissionv1.WebhookClientConfig, rules []admissionv1.RuleWithOperations, sel **metav1.LabelSelector) bool {
		url := base
		if cc.Service != nil && cc.Service.Path != nil {
			url += *cc.Service.Path
		}
		*cc = admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
		for _, r := range rules {
			if slices.Contains(r.Resources, "pods") {
				*sel = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: jobSetPodLabel, Operator: metav1.LabelSelectorOpExists}}}
			}
		}
		return true
	})
}
