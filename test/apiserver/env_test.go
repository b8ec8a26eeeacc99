package apiserver_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"
)

func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// kubeAssets returns a directory holding etcd, kube-apiserver and kubectl: the one in
// KUBEBUILDER_ASSETS, or the cache hack/kube-binaries.sh fills (a cold build
// takes about 5 minutes on 2 cores, a warm one under a second). Outside CI a
// machine that cannot build them skips; in CI that is a failure.
func kubeAssets(t testing.TB) string { return kubeAssetsFor(t, "") }

// kubeAssetsFor is kubeAssets for the Kubernetes release version (such as
// "v1.36.3"; "" is the script's default, which KUBEBUILDER_ASSETS may
// stand for).
func kubeAssetsFor(t testing.TB, version string) string {
	t.Helper()
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" && version == "" {
		if _, err := os.Stat(filepath.Join(dir, "kubectl")); err == nil {
			return dir
		}
	}
	bins := []string{"etcd", "kube-apiserver", "kubectl"}
	if version != "" {
		// Other releases serve API calls only: no kubectl.
		bins = bins[:2]
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(repoRoot(t), "hack", "kube-binaries.sh")}, bins...)...)
	if version != "" {
		cmd.Env = append(os.Environ(), "KUBE_VERSION="+version)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := lines[len(lines)-1]
	if err == nil {
		for _, b := range bins {
			if _, serr := os.Stat(filepath.Join(dir, b)); serr != nil {
				err = serr
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcd and kube-apiserver are required in CI: hack/kube-binaries.sh: %v", err)
		}
		t.Skipf("no etcd/kube-apiserver (hack/kube-binaries.sh: %v); set KUBEBUILDER_ASSETS", err)
	}
	return dir
}

// startAPIServer runs a real etcd + kube-apiserver with the
// ContainerRestartRules gate set as asked.
func startAPIServer(t *testing.T, assets string, gate bool) (*envtest.Environment, kubernetes.Interface) {
	t.Helper()
	return startAPIServerWith(t, assets, gate, nil)
}

// startAPIServerWith is startAPIServer with extra kube-apiserver flags.
func startAPIServerWith(t *testing.T, assets string, gate bool, flags map[string]string) (*envtest.Environment, kubernetes.Interface) {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 2 * time.Minute, ControlPlaneStopTimeout: time.Minute}
	gateArg := "ContainerRestartRules=false"
	if gate {
		gateArg = "ContainerRestartRules=true"
	}
	env.ControlPlane.GetAPIServer().Configure().Append("feature-gates", gateArg)
	for k, v := range flags {
		env.ControlPlane.GetAPIServer().Configure().Append(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start etcd + kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop control plane: %v", err)
		}
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env, client
}

// projectWebhookConfig is deploy/base/webhook.yaml, unchanged except that
// the API server reaches the webhook at url instead of through the Service.
func projectWebhookConfig(t testing.TB, url string, caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "base", "webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(b, &mwc); err != nil {
		t.Fatalf("deploy/base/webhook.yaml: %v", err)
	}
	if len(mwc.Webhooks) == 0 || len(mwc.Webhooks[0].MatchConditions) == 0 {
		t.Fatal("deploy/base/webhook.yaml: no webhooks or no matchConditions")
	}
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.Service = nil
		mwc.Webhooks[i].ClientConfig.URL = &url
		mwc.Webhooks[i].ClientConfig.CABundle = caBundle
	}
	return &mwc
}

func waitFor(t testing.TB, what string, timeout time.Duration, f func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var lastErr error
	for {
		ok, err := f(ctx)
		if ok {
			return
		}
		lastErr = err
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s (last error: %v)", what, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
