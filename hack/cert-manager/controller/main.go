//go:build certmanager

// Command controller runs cert-manager's own control loops (from the
// github.com/cert-manager/cert-manager module) for the CA and self-signed
// issuers and the Certificate life cycle, without leader election, against the
// API server of --kubeconfig. hack/cert-manager.sh builds it; the release's
// cmd/controller is a separate Go module that the module proxy does not serve.
//
// Only what deploy/certificate.yaml needs is compiled in: no ACME, Vault,
// Venafi, ingress or Gateway controllers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each package registers its control loop with controllerpkg.Register.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The issuer types the issuers controller can set up.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// certManagerVersion is the version of the cert-manager module linked in.
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
		clusterNS  = fs.String("cluster-resource-namespace", "kube-system", "namespace of ClusterIssuer secrets")
		workers    = fs.Int("workers", 5, "workers per control loop")
		version    = fs.Bool("version", false, "print the cert-manager version and exit")
	)
	var known []string
	for name := range controllerpkg.Known() {
		known = append(known, name)
	}
	sort.Strings(known)
	controllers := fs.String("controllers", strings.Join(known, ","), "control loops to run")
	_ = fs.Parse(os.Args[1:])

	if *version {
		fmt.Println("cert-manager controller", certManagerVersion())
		return
	}
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "--kubeconfig is required")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	log := logf.FromContext(ctx)

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          *namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: *clusterNS,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
		},
	})
	if err != nil {
		log.Error(err, "building the controller context")
		os.Exit(1)
	}
	base, err := factory.Build()
	if err != nil {
		log.Error(err, "building the controller context")
		os.Exit(1)
	}

	var loops []controllerpkg.Interface
	var names []string
	for _, name := range strings.Split(*controllers, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown controller %q (compiled in: %s)\n", name, strings.Join(known, ", "))
			os.Exit(2)
		}
		loop, err := construct(factory)
		if err != nil {
			log.Error(err, "constructing the control loop", "controller", name)
			os.Exit(1)
		}
		loops = append(loops, loop)
		names = append(names, name)
	}

	// The loops registered their informers while being constructed.
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	failed := make(chan error, len(loops))
	for i, loop := range loops {
		wg.Add(1)
		go func(name string, loop controllerpkg.Interface) {
			defer wg.Done()
			log.Info("starting control loop", "controller", name)
			if err := loop.Run(*workers, ctx); err != nil {
				failed <- fmt.Errorf("%s: %w", name, err)
			}
		}(names[i], loop)
	}
	log.Info("running", "version", certManagerVersion(), "controllers", names)
	select {
	case err := <-failed:
		log.Error(err, "control loop failed")
		stop()
		wg.Wait()
		os.Exit(1)
	case <-ctx.Done():
	}
	wg.Wait()
}
