//go:build certmanager

// Command cainjector runs cert-manager's CA injector (from the
// github.com/cert-manager/cert-manager module) for webhook configurations,
// without leader election, against the API server of --kubeconfig: it copies
// the CA of the Certificate named by an object's cert-manager.io/inject-ca-from
// annotation into the object's caBundle fields. hack/cert-manager.sh builds
// it; the release's cmd/cainjector is a separate Go module that the module
// proxy does not serve.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func certManagerVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cert-manager/cert-manager" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func main() {
	// A flag set of its own: linked packages register flags of theirs on
	// the global one (controller-runtime its own --kubeconfig).
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	var (
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig of the API server (required)")
		namespace  = fs.String("namespace", "", "only this namespace (default: all)")
		version    = fs.Bool("version", false, "print the cert-manager version and exit")
	)
	_ = fs.Parse(os.Args[1:])
	if *version {
		fmt.Println("cert-manager cainjector", certManagerVersion())
		return
	}
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "--kubeconfig is required")
		os.Exit(2)
	}
	ctrl.SetLogger(klog.NewKlogr())
	log := ctrl.Log.WithName("cainjector")

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Error(err, "reading the kubeconfig")
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{kscheme.AddToScheme, cmscheme.AddToScheme, apiext.AddToScheme, apireg.AddToScheme} {
		if err := add(scheme); err != nil {
			log.Error(err, "building the scheme")
			os.Exit(1)
		}
	}
	var namespaces map[string]cache.Config
	if *namespace != "" {
		namespaces = map[string]cache.Config{*namespace: {}}
	}
	mgr, err := ctrl.NewManager(util.RestConfigWithUserAgent(cfg, "cainjector"), ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{DefaultNamespaces: namespaces},
		// Secrets are watched as metadata only; their data is read directly.
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    *namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
		},
	}); err != nil {
		log.Error(err, "registering the injectors")
		os.Exit(1)
	}
	log.Info("running", "version", certManagerVersion())
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}
