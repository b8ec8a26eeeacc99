package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

func init() {
	register("serve", "run the mutating admission webhook (HTTPS)", runServe)
}

// serveConfig is everything `restart-injector serve` is told on its command line.
type serveConfig struct {
	listen, healthListen string
	certDir, certMode    string
	namespace, service   string
	webhookConfig        string
	caSecret             string
	extraSANs            string
	native               string
	nativeInterval       time.Duration
	onEntrypointError    string
	registryLookup       bool
	lookupTimeout        time.Duration
	supervisorImage      string
	pullPolicy           string
	volumeMedium         string
	kubeconfig           string
	logFormat, logLevel  string
	shutdownDelay        time.Duration
	shutdownTimeout      time.Duration
	selfSigned           *bool
}

func serveFlags(fs *flag.FlagSet) *serveConfig {
	c := &serveConfig{}
	fs.StringVar(&c.listen, "listen", ":8443", "`ADDR` of the HTTPS admission endpoint (/mutate)")
	fs.StringVar(&c.healthListen, "health-listen", ":8081", "`ADDR` of the plain-HTTP /healthz, /readyz and /metrics endpoint")
	fs.StringVar(&c.certDir, "cert-dir", "/etc/restart-injector/tls", "`DIR` holding tls.crt and tls.key (reloaded on change)")
	fs.StringVar(&c.certMode, "cert-mode", "files", "`MODE`: files (a mounted Secret, e.g. from cert-manager) or self (create a CA and patch the webhook's caBundle)")
	selfSigned := fs.Bool("self-signed", false, "shorthand for --cert-mode=self")
	fs.StringVar(&c.namespace, "namespace", "", "`NAMESPACE` of the webhook (default: $POD_NAMESPACE, then the service account's namespace)")
	fs.StringVar(&c.service, "service", "restart-injector", "`NAME` of the webhook's Service (self mode: the certificate's DNS names)")
	fs.StringVar(&c.webhookConfig, "webhook-config", "restart-injector", "`NAME` of the MutatingWebhookConfiguration whose caBundle self mode patches")
	fs.StringVar(&c.caSecret, "ca-secret", "restart-injector-ca", "`NAME` of the Secret that self mode keeps its CA in")
	fs.StringVar(&c.extraSANs, "extra-sans", "", "comma-separated extra DNS names and IP addresses for the self-managed certificate")
	fs.StringVar(&c.native, "native", "auto", "`MODE`: off (always inject), auto (leave pods alone once the cluster honours restartPolicyRules), on (never inject)")
	fs.DurationVar(&c.nativeInterval, "native-interval", 5*time.Minute, "how often --native=auto re-checks the cluster")
	fs.StringVar(&c.onEntrypointError, "on-entrypoint-error", "deny", "`POLICY` when an image entrypoint cannot be resolved: deny, or allow (admit without the supervisor, with a warning)")
	fs.BoolVar(&c.registryLookup, "registry-lookup", true, "look up the entrypoint of images for containers without command")
	fs.DurationVar(&c.lookupTimeout, "lookup-timeout", 5*time.Second, "bound of one registry lookup (keep it below the webhook's timeoutSeconds)")
	fs.StringVar(&c.supervisorImage, "supervisor-image", "", "`IMAGE` of the install init container (default "+injector.DefaultSupervisorImage()+")")
	fs.StringVar(&c.pullPolicy, "image-pull-policy", "", "imagePullPolicy of the install init container (default: the API server's)")
	fs.StringVar(&c.volumeMedium, "volume-medium", "", "`MEDIUM` of the injected emptyDirs: \"\" (node disk) or Memory")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "`FILE` for API access outside a cluster (default: in-cluster config)")
	fs.StringVar(&c.logFormat, "log-format", "json", "log `FORMAT`: json or text")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn, error")
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay", 5*time.Second, "keep serving this long after SIGTERM while reporting not ready")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 20*time.Second, "bound of the drain of in-flight reviews")
	c.selfSigned = selfSigned
	return c
}

func runServe(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: restart-injector serve [flags]\n\nRun the mutating admission webhook. Flags:")
		fs.PrintDefaults()
	}
	c := serveFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "restart-injector serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "restart-injector serve: %v\n", err)
		return exitUsage
	}
	log := newLogger(c.logFormat, c.logLevel)
	if err := serve(ctx, c, log); err != nil {
		log.Error("restart-injector serve failed", "err", err)
		return exitFailure
	}
	return exitOK
}

func (c *serveConfig) validate() error {
	if *c.selfSigned {
		if c.certMode != "files" && c.certMode != "self" {
			return fmt.Errorf("--self-signed conflicts with --cert-mode=%s", c.certMode)
		}
		c.certMode = "self"
	}
	switch c.certMode {
	case "files", "self":
	default:
		return fmt.Errorf("--cert-mode: %q is not one of files, self", c.certMode)
	}
	switch webhook.NativeMode(c.native) {
	case webhook.NativeOff, webhook.NativeAuto, webhook.NativeOn:
	default:
		return fmt.Errorf("--native: %q is not one of off, auto, on", c.native)
	}
	switch webhook.EntrypointPolicy(c.onEntrypointError) {
	case webhook.EntrypointDeny, webhook.EntrypointAllow:
	default:
		return fmt.Errorf("--on-entrypoint-error: %q is not one of deny, allow", c.onEntrypointError)
	}
	switch corev1.PullPolicy(c.pullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy: %q is not one of Always, IfNotPresent, Never", c.pullPolicy)
	}
	switch corev1.StorageMedium(c.volumeMedium) {
	case corev1.StorageMediumDefault, corev1.StorageMediumMemory:
	default:
		return fmt.Errorf("--volume-medium: %q is not one of \"\", Memory", c.volumeMedium)
	}
	switch c.logFormat {
	case "json", "text":
	default:
		return fmt.Errorf("--log-format: %q is not one of json, text", c.logFormat)
	}
	if _, err := parseLevel(c.logLevel); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	if c.namespace == "" {
		c.namespace = os.Getenv("POD_NAMESPACE")
	}
	if c.namespace == "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			c.namespace = strings.TrimSpace(string(b))
		}
	}
	if c.namespace == "" && (c.certMode == "self" || c.native == string(webhook.NativeAuto)) {
		return errors.New("--namespace is required outside a pod (self-managed certificates and --native=auto use it)")
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

func newLogger(format, level string) *slog.Logger {
	l, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: l}
	if format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

// needsCluster reports whether serve talks to the API server at all: a
// files-mode webhook with --native=off and no registry lookups runs without
// any RBAC.
func (c *serveConfig) needsCluster() bool {
	return c.certMode == "self" || c.native == string(webhook.NativeAuto) || c.registryLookup
}

func (c *serveConfig) restConfig() (*rest.Config, error) {
	if c.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	}
	return rest.InClusterConfig()
}

// countingTransport counts registry requests: the lookups that the
// resolver's digest cache did not answer.
type countingTransport struct {
	next http.RoundTripper
	reqs *prometheus.CounterVec
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	code := "error"
	if err == nil {
		code = fmt.Sprint(resp.StatusCode)
	}
	t.reqs.WithLabelValues(r.Method, code).Inc()
	return resp, err
}

// serve runs the webhook until ctx is done.
func serve(ctx context.Context, c *serveConfig, log *slog.Logger) error {
	registryReqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "restart_injector_registry_requests_total",
		Help: "HTTP requests to image registries made by entrypoint lookups (cache misses), by method and status code.",
	}, []string{"method", "code"})
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "restart_injector_entrypoint_lookups_total",
		Help: "Image entrypoint lookups, by whether the resolver's cache answered them (cache=hit) or the registry was asked (cache=miss).",
	}, []string{"cache"})
	metrics := webhook.NewMetrics(registryReqs, lookups)

	var client kubernetes.Interface
	if c.needsCluster() {
		cfg, err := c.restConfig()
		if err != nil {
			if c.certMode == "self" || c.native == string(webhook.NativeAuto) {
				return fmt.Errorf("API access (needed by --cert-mode=self and --native=auto): %w", err)
			}
			log.Warn("no API access: registry lookups will not use the pods' imagePullSecrets", "err", err)
		} else {
			cfg.UserAgent = "restart-injector/" + contract.Version
			if client, err = kubernetes.NewForConfig(cfg); err != nil {
				return fmt.Errorf("API client: %w", err)
			}
		}
	}

	opts := injector.Options{
		SupervisorImage: c.supervisorImage,
		ImagePullPolicy: corev1.PullPolicy(c.pullPolicy),
		VolumeMedium:    corev1.StorageMedium(c.volumeMedium),
	}
	if c.registryLookup {
		ropts := injector.ResolverOptions{
			Timeout:   c.lookupTimeout,
			Transport: countingTransport{next: http.DefaultTransport, reqs: registryReqs},
			Observe: func(hit bool) {
				if hit {
					lookups.WithLabelValues("hit").Inc()
				} else {
					lookups.WithLabelValues("miss").Inc()
				}
			},
		}
		if client != nil {
			ropts.PullSecrets = func(ctx context.Context, namespace string, names []string) ([]corev1.Secret, error) {
				var out []corev1.Secret
				for _, n := range names {
					s, err := client.CoreV1().Secrets(namespace).Get(ctx, n, metav1.GetOptions{})
					if err != nil {
						// The kubelet also tolerates a missing pull secret.
						log.Debug("pull secret not readable", "namespace", namespace, "name", n, "err", err)
						continue
					}
					out = append(out, *s)
				}
				return out, nil
			}
		}
		opts.Resolver = injector.NewResolver(ropts)
	}

	certs := webhook.NewCertWatcher(c.certDir, log, func(t time.Time) { metrics.CertExpiry.Set(float64(t.Unix())) })
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if c.certMode == "self" {
		sm := &webhook.SelfManaged{
			Client: client, Namespace: c.namespace, CASecret: c.caSecret, WebhookConfig: c.webhookConfig,
			DNSNames: webhook.ServiceDNSNames(c.service, c.namespace), Dir: c.certDir,
		}
		for _, san := range strings.Split(c.extraSANs, ",") {
			switch san = strings.TrimSpace(san); {
			case san == "":
			case net.ParseIP(san) != nil:
				sm.IPs = append(sm.IPs, san)
			default:
				sm.DNSNames = append(sm.DNSNames, san)
			}
		}
		ca, serving, err := startSelfManaged(ctx, sm, log)
		if err != nil {
			return err
		}
		go sm.Maintain(ctx, ca, serving, time.Hour, func(err error) { log.Warn("self-managed certificates", "err", err) })
	}
	if err := certs.Load(); err != nil {
		// cert-manager may not have issued the certificate yet: stay up,
		// not ready, and pick it up when the Secret volume fills.
		log.Warn("no serving certificate yet; not ready until one appears", "err", err)
	}
	go func() {
		if err := certs.Watch(ctx); err != nil {
			log.Error("certificate reload disabled", "err", err)
		}
	}()

	h := &webhook.Handler{
		Mutator:    injector.New(opts),
		Entrypoint: webhook.EntrypointPolicy(c.onEntrypointError),
		Native:     webhook.NativeMode(c.native),
		Metrics:    metrics,
		Log:        log,
	}
	if client != nil && c.namespace != "" {
		// Also outside auto mode: whether the API server keeps the fields
		// decides if workload templates need the annotation carrier.
		d := &webhook.NativeDetector{Client: client, Namespace: c.namespace, Interval: c.nativeInterval, Log: log}
		h.Fields = d
		if h.Native == webhook.NativeAuto {
			d.Metrics = metrics
			h.NativeState = d
		}
		go d.Run(ctx)
	}
	if h.Native != webhook.NativeAuto {
		metrics.NativeHonoured.Set(map[bool]float64{true: 1}[h.Native == webhook.NativeOn])
	}

	mutateLn, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	healthLn, err := net.Listen("tcp", c.healthListen)
	if err != nil {
		mutateLn.Close()
		return fmt.Errorf("--health-listen: %w", err)
	}
	srv := &webhook.Server{Handler: h, Certs: certs, Metrics: metrics, Log: log,
		ShutdownDelay: c.shutdownDelay, ShutdownTimeout: c.shutdownTimeout}
	log.Info("restart-injector starting", "version", contract.Version, "certMode", c.certMode,
		"native", c.native, "onEntrypointError", c.onEntrypointError, "registryLookup", c.registryLookup)
	return srv.Serve(ctx, mutateLn, healthLn)
}

// startSelfManaged retries the first CA/caBundle round for a while: at
// install time the API server may still be creating the Role binding.
func startSelfManaged(ctx context.Context, sm *webhook.SelfManaged, log *slog.Logger) (webhook.KeyPair, webhook.KeyPair, error) {
	delay := time.Second
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ca, serving, err := sm.Start(ctx)
		if err == nil {
			log.Info("self-managed certificates ready", "caSecret", sm.Namespace+"/"+sm.CASecret,
				"webhookConfiguration", sm.WebhookConfig, "dnsNames", sm.DNSNames)
			return ca, serving, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return webhook.KeyPair{}, webhook.KeyPair{}, fmt.Errorf("self-managed certificates: %w", err)
		}
		log.Warn("self-managed certificates: retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 15*time.Second)
	}
}
