package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// localServer is what a webhook server on the host needs: a serving
// certificate for 127.0.0.1 and localhost from a CA made here, and two free
// loopback ports (serving and health).
type localServer struct {
	caPEM            []byte
	certDir          string // tls.crt, tls.key, ca.crt
	port, healthPort int
}

// newLocalServer makes a localServer whose files live in Dir/pki/name.
func (c *Cluster) newLocalServer(name string) (localServer, error) {
	now := time.Now()
	ca, err := webhook.NewCA(name+"-e2e-ca", now)
	if err != nil {
		return localServer{}, err
	}
	serving, err := webhook.NewServingCert(ca, []string{"localhost"}, []string{"127.0.0.1"}, now)
	if err != nil {
		return localServer{}, err
	}
	srv := localServer{caPEM: ca.CertPEM, certDir: c.path("pki", name)}
	if err := webhook.WriteKeyPair(srv.certDir, serving, ca.CertPEM); err != nil {
		return localServer{}, err
	}
	if srv.port, err = freePort(); err != nil {
		return localServer{}, err
	}
	if srv.healthPort, err = freePort(); err != nil {
		return localServer{}, err
	}
	return srv, nil
}

// InjectorBinary is the restart-injector binary of the repository, built
// once per cluster: the webhook runs it, and so do scenarios that inject
// manifests offline.
func (c *Cluster) InjectorBinary(repo string) (string, error) {
	c.injectorOnce.Do(func() {
		bin := c.path("bin", "restart-injector")
		if c.injectorErr = os.MkdirAll(filepath.Dir(bin), 0o755); c.injectorErr != nil {
			return
		}
		if c.injectorErr = goBuildStatic(repo, "./cmd/restart-injector", bin); c.injectorErr == nil {
			c.injectorBin = bin
		}
	})
	return c.injectorBin, c.injectorErr
}

// StartWebhook runs `restart-injector serve` on the host and registers the
// MutatingWebhookConfiguration from deploy/base/webhook.yaml, with its
// clientConfig pointed at the host process (https://127.0.0.1:PORT/mutate)
// and a caBundle from a CA made here. It returns once the API server
// actually calls the webhook (configurations arrive through an informer).
func (c *Cluster) StartWebhook(ctx context.Context, repo string) error {
	bin, err := c.InjectorBinary(repo)
	if err != nil {
		return err
	}
	srv, err := c.newLocalServer("webhook")
	if err != nil {
		return err
	}
	certDir, port, health := srv.certDir, srv.port, srv.healthPort
	err = c.Start("restart-injector", []string{bin, "serve",
		fmt.Sprintf("--listen=127.0.0.1:%d", port),
		fmt.Sprintf("--health-listen=127.0.0.1:%d", health),
		"--cert-dir", certDir, "--cert-mode=files",
		"--kubeconfig", c.Kubeconfig, "--namespace=default",
		// --native=auto as deployed: it must find that this API server
		// drops the fields and inject. Every scenario container has a
		// command, so no registry lookups (none is reachable).
		"--native=auto", "--registry-lookup=false", "--delivery=" + c.Delivery,
		"--supervisor-image", SupervisorImage, "--image-pull-policy=Never",
		"--log-format=text",
	}, nil)
	if err != nil {
		return err
	}
	err = c.waitFor(ctx, "restart-injector", 30*time.Second, func() error {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/readyz", health), nil)
		return expectOK(http.DefaultClient, req)
	})
	if err != nil {
		return err
	}

	raw, err := os.ReadFile(filepath.Join(repo, "deploy", "base", "webhook.yaml"))
	if err != nil {
		return err
	}
	var cfg admissionv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return fmt.Errorf("deploy/base/webhook.yaml: %w", err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate", port)
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: &url, CABundle: srv.caPEM}
	}
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", cfg.Name, err)
	}
	// A dry-run pod with a rule shows when the API server calls the webhook.
	never := corev1.ContainerRestartPolicyNever
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: c.NodeName, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "c", Image: BusyboxImage, Command: []string{"true"}, RestartPolicy: &never,
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}},
		}}},
	}
	// Its rules travel in the annotation, which --native=auto injects on
	// every release (only this project reads it), so the probe shows the
	// webhook called also where the cluster honours the fields and auto
	// leaves such pods alone.
	if err := RulesToAnnotation(&probe.ObjectMeta, &probe.Spec); err != nil {
		return err
	}
	return c.waitFor(ctx, "restart-injector", 30*time.Second, func() error {
		got, err := c.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if _, ok := got.Annotations[contract.AnnotationStatus]; !ok {
			return fmt.Errorf("pod not mutated yet")
		}
		return nil
	})
}
