package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
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
	cfg := c.Config
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crd, err := readCRD(filepath.Join(dir, "crds", "jobset.x-k8s.io_jobsets.yaml"))
	if err != nil {
		return err
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CRD %s: %w", crd.Name, err)
	}
	err = c.waitFor(ctx, "kube-apiserver", 60*time.Second, func() error {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return nil
			}
		}
		return errors.New("CRD not established yet")
	})
	if err != nil {
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

func readCRD(path string) (*apiextv1.CustomResourceDefinition, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &crd, nil
}

// registerJobSetWebhooks creates the release's webhook configurations with
// each clientConfig pointed at base + the release's path.
func (c *Cluster) registerJobSetWebhooks(ctx context.Context, path, base string, caPEM []byte) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	// adapt points a webhook at base + the release's path and scopes the
	// pod webhooks to JobSet's pods, as the release's kustomize patches do.
	adapt := func(cc *admissionv1.WebhookClientConfig, rules []admissionv1.RuleWithOperations, sel **metav1.LabelSelector) {
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
	}
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			var cfg admissionv1.MutatingWebhookConfiguration
			if err := yaml.Unmarshal(doc, &cfg); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			cfg.Name = "jobset-" + cfg.Name
			for i := range cfg.Webhooks {
				adapt(&cfg.Webhooks[i].ClientConfig, cfg.Webhooks[i].Rules, &cfg.Webhooks[i].ObjectSelector)
			}
			if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", cfg.Name, err)
			}
		case "ValidatingWebhookConfiguration":
			var cfg admissionv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal(doc, &cfg); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			cfg.Name = "jobset-" + cfg.Name
			for i := range cfg.Webhooks {
				adapt(&cfg.Webhooks[i].ClientConfig, cfg.Webhooks[i].Rules, &cfg.Webhooks[i].ObjectSelector)
			}
			if _, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create ValidatingWebhookConfiguration %s: %w", cfg.Name, err)
			}
		}
	}
}
