package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// This file installs what a controller's release ships beside its binary
// (JobSet's, Kueue's): its CustomResourceDefinitions and its webhook
// configurations, adapted to a controller that runs on the host.

// installCRDs creates the CustomResourceDefinitions of the files and waits
// until every one is established.
func (c *Cluster) installCRDs(ctx context.Context, paths ...string) error {
	ext, err := apiextclient.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	var names []string
	for _, path := range paths {
		crd, err := readCRD(path)
		if err != nil {
			return err
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	return c.waitFor(ctx, "kube-apiserver", 60*time.Second, func() error {
		for _, name := range names {
			got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			established := false
			for _, cond := range got.Status.Conditions {
				established = established || cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue
			}
			if !established {
				return fmt.Errorf("CRD %s not established yet", name)
			}
		}
		return nil
	})
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

// webhookAdapter decides what becomes of one webhook of a release's
// configuration: keep false leaves it out; else the webhook is registered
// with the adapter's changes to its clientConfig and objectSelector.
type webhookAdapter func(cc *admissionv1.WebhookClientConfig, rules []admissionv1.RuleWithOperations, sel **metav1.LabelSelector) (keep bool)

// registerWebhooks creates the webhook configurations of the release file
// path, each named prefix + its name, with the webhooks adapt keeps.
func (c *Cluster) registerWebhooks(ctx context.Context, path, prefix string, adapt webhookAdapter) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
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
			cfg.Name, cfg.Webhooks = prefix+cfg.Name, kept(cfg.Webhooks, func(h *admissionv1.MutatingWebhook) bool {
				return adapt(&h.ClientConfig, h.Rules, &h.ObjectSelector)
			})
			if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", cfg.Name, err)
			}
		case "ValidatingWebhookConfiguration":
			var cfg admissionv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal(doc, &cfg); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			cfg.Name, cfg.Webhooks = prefix+cfg.Name, kept(cfg.Webhooks, func(h *admissionv1.ValidatingWebhook) bool {
				return adapt(&h.ClientConfig, h.Rules, &h.ObjectSelector)
			})
			if _, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create ValidatingWebhookConfiguration %s: %w", cfg.Name, err)
			}
		}
	}
}

// kept is the webhooks keep says yes to, as keep changed them.
func kept[W any](hooks []W, keep func(*W) bool) []W {
	var out []W
	for i := range hooks {
		if keep(&hooks[i]) {
			out = append(out, hooks[i])
		}
	}
	return out
}
