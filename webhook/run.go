package webhook

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// CertMode says where the serving certificate comes from.
type CertMode string

const (
	// CertFiles reads the certificate from a directory that something
	// else fills, normally a Secret volume issued by cert-manager.
	CertFiles CertMode = "files"
	// CertSelf creates a CA, keeps it in a Secret, issues the serving
	// certificate itself and patches the webhook configuration's caBundle.
	CertSelf CertMode = "self"
)

// Config is what Run serves with. Fields left at their zero value take the
// defaults of `restart-injector serve` unless their comment says otherwise.
type Config struct {
	// Listen is the TCP address of the HTTPS admission endpoint (/mutate).
	// If Listen is empty, Run listens on ":8443".
	Listen string
	// HealthListen is the TCP address of the plain-HTTP /healthz, /readyz
	// and /metrics endpoint. If HealthListen is empty, Run listens on
	// ":8081".
	HealthListen string

	// CertDir is the directory holding tls.crt and tls.key, reloaded when
	// it changes; CertSelf writes them there. If CertDir is empty,
	// "/etc/restart-injector/tls" is used.
	CertDir string
	// CertMode is CertFiles or CertSelf. If CertMode is empty, CertFiles
	// is used: Run stays up, reporting not ready, until a certificate
	// appears in CertDir. Any other value makes Run fail.
	CertMode CertMode
	// Namespace is the webhook's own namespace: CertSelf keeps its CA
	// Secret there, and the native-mode detector dry-runs its probe pod
	// there. If Namespace is empty, Run uses PodNamespace; if that is
	// empty too, Run fails when CertMode is CertSelf or Native is
	// NativeAuto, and otherwise does without the detector.
	Namespace string
	// Service is the name of the webhook's Service, whose DNS names
	// CertSelf issues the certificate for. If Service is empty,
	// "restart-injector" is used.
	Service string
	// WebhookConfig is the MutatingWebhookConfiguration whose caBundle
	// CertSelf patches. If WebhookConfig is empty, "restart-injector" is
	// used.
	WebhookConfig string
	// CASecret is the Secret in Namespace where CertSelf keeps its CA. If
	// CASecret is empty, "restart-injector-ca" is used.
	CASecret string
	// ExtraSANs are DNS names and IP addresses the self-managed
	// certificate is also issued for; empty entries are skipped. CertFiles
	// ignores them.
	ExtraSANs []string

	// Native is NativeOff (always inject), NativeAuto (inject until the
	// cluster is seen to honour restartPolicyRules) or NativeOn (never
	// inject). If Native is empty, NativeAuto is used. Any other value
	// makes Run fail.
	Native NativeMode
	// NativeInterval is how often the cluster is checked again. If
	// NativeInterval is zero, it is five minutes.
	NativeInterval time.Duration
	// NarrowSelf, with Native NativeAuto, names the webhook's own
	// MutatingWebhookConfiguration, whose pods webhook it narrows to the
	// annotation carrier while every node honours both features natively
	// and widens back when one does not (SelfNarrower). Empty: never.
	NarrowSelf string

	// OnEntrypointError is what happens to a pod whose image entrypoint
	// cannot be resolved: EntrypointDeny or EntrypointAllow. If it is
	// empty, EntrypointDeny is used. Any other value makes Run fail.
	OnEntrypointError EntrypointPolicy
	// RegistryLookup makes Run look up the entrypoint of images for
	// containers without command, with the pods' imagePullSecrets when the
	// API server is reachable. If RegistryLookup is false, such
	// containers need the entrypoint annotation.
	RegistryLookup bool
	// LookupTimeout bounds one registry lookup; keep it below the
	// webhook's timeoutSeconds. If LookupTimeout is zero, it is five
	// seconds.
	LookupTimeout time.Duration
	// InsecureRegistries (HOST[:PORT]) are the only registries lookups
	// reach over plain HTTP; any other is reached over HTTPS only. An
	// entry that does not parse makes Run fail.
	InsecureRegistries []string
	// AllowedRegistries, when not empty, are the only registries (HOST[:PORT])
	// whose images are looked up; a pod whose image is elsewhere is denied
	// (or admitted with a warning under EntrypointAllow) without any
	// request. An entry that does not parse makes Run fail.
	AllowedRegistries []string

	// ClientCAFile, when set, is a PEM file of CA certificates: /mutate then
	// requires a TLS client certificate signed by one of them, which the API
	// server presents when its admission configuration names one for this
	// webhook (docs/webhook.md). Read once at start.
	ClientCAFile string

	// SupervisorImage is the image of the install init container, or of
	// the image volume. If it is empty,
	// injector.ImageRepository:contract.Version is used.
	SupervisorImage string
	// ImagePullPolicy is the install container's imagePullPolicy, or the
	// image volume's pullPolicy. If it is empty, the API server's
	// defaulting decides.
	ImagePullPolicy corev1.PullPolicy
	// PlatformUID leaves the install container's UID to the platform
	// (injector.Options.PlatformUID).
	PlatformUID bool
	// SupervisorPullSecrets are added to every injected pod's
	// imagePullSecrets (injector.Options.PullSecrets).
	SupervisorPullSecrets []string
	// Delivery is DeliveryCopy (the install init container), DeliveryImage
	// (an image volume) or DeliveryAuto (an image volume once
	// ImageVolumeDetector finds the API server, every kubelet and every
	// runtime able to mount it; the copy until then, and always when
	// there is no API server to ask). If Delivery is empty, DeliveryAuto is
	// used. Any other value makes Run fail.
	Delivery DeliveryMode
	// VolumeMedium is the medium of the injected emptyDirs. If it is
	// empty, they live on the node's disk.
	VolumeMedium corev1.StorageMedium
	// Backoff is the in-place back-off of wrapped containers whose rules
	// annotation gives none (injector.Options.Backoff).
	Backoff rules.Backoff

	// Kubeconfig is the file Run reads API access from. If Kubeconfig is
	// empty, the in-cluster configuration is used. The API server is only
	// contacted when CertMode is CertSelf, Native is NativeAuto or
	// RegistryLookup is set.
	Kubeconfig string

	// Log receives everything Run reports. If Log is nil, slog.Default()
	// is used.
	Log *slog.Logger
	// ShutdownDelay is how long Run keeps serving, reporting not ready,
	// once ctx is done, so the API server stops choosing this replica
	// first. If ShutdownDelay is zero, Run stops accepting at once.
	ShutdownDelay time.Duration
	// ShutdownTimeout bounds the drain of in-flight reviews. If it is
	// zero, it is twenty seconds.
	ShutdownTimeout time.Duration

	// MaxInFlight bounds the reviews answered at once; one more gets 429
	// with Retry-After, which the API server retries. If MaxInFlight is
	// zero, it is MaxInFlightFor the container's memory limit
	// (MemoryLimit), which also sets the Go runtime's soft limit
	// (GOMEMLIMIT, unless set) to 80 % of it. Negative: no bound.
	MaxInFlight int
}

// serviceAccountNamespaceFile is where the kubelet tells a pod its
// namespace when the service account token is mounted.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace returns the namespace this process's pod runs in: the
// POD_NAMESPACE variable (set from the downward API), else the service
// account's namespace file. It returns "" outside a pod.
func PodNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// withDefaults fills the zero fields and rejects values Run cannot serve
// with.
func (c Config) withDefaults() (Config, error) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Listen, ":8443")
	def(&c.HealthListen, ":8081")
	def(&c.CertDir, "/etc/restart-injector/tls")
	def(&c.Service, "restart-injector")
	def(&c.WebhookConfig, "restart-injector")
	def(&c.CASecret, "restart-injector-ca")
	def((*string)(&c.CertMode), string(CertFiles))
	def((*string)(&c.Native), string(NativeAuto))
	def((*string)(&c.Delivery), string(DeliveryAuto))
	def((*string)(&c.OnEntrypointError), string(EntrypointDeny))
	def(&c.Namespace, PodNamespace())
	if c.Log == nil {
		c.Log = slog.Default()
	}
	switch {
	case c.CertMode != CertFiles && c.CertMode != CertSelf:
		return c, fmt.Errorf("certificate mode %q is not one of files, self", c.CertMode)
	case c.Native != NativeOff && c.Native != NativeAuto && c.Native != NativeOn:
		return c, fmt.Errorf("native mode %q is not one of off, auto, on", c.Native)
	case c.Delivery != DeliveryCopy && c.Delivery != DeliveryImage && c.Delivery != DeliveryAuto:
		return c, fmt.Errorf("delivery %q is not one of copy, image, auto", c.Delivery)
	case c.OnEntrypointError != EntrypointDeny && c.OnEntrypointError != EntrypointAllow:
		return c, fmt.Errorf("entrypoint policy %q is not one of deny, allow", c.OnEntrypointError)
	case c.Namespace == "" && (c.CertMode == CertSelf || c.Native == NativeAuto):
		return c, errors.New("the webhook's namespace is needed by self-managed certificates and native auto mode, and is unknown outside a pod")
	}
	for _, list := range []*[]string{&c.InsecureRegistries, &c.AllowedRegistries} {
		for i, r := range *list {
			n, err := registry.NormalizeRegistry(r)
			if err != nil {
				return c, err
			}
			(*list)[i] = n
		}
	}
	return c, nil
}

// ClientCAs reads ClientCAFile, the CA bundle /mutate verifies client
// certificates against (Server.ClientCAs); nil when none is configured.
func (c Config) ClientCAs() (*x509.CertPool, error) {
	if c.ClientCAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(c.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA file %s: no PEM certificate in it", c.ClientCAFile)
	}
	return pool, nil
}

// Run serves admission reviews until ctx is done, then drains as
// Server.Serve does. It owns everything a webhook process needs: the API
// client, the registry resolver, the serving certificate (loaded, watched
// and, in CertSelf mode, issued and renewed), native-mode detection, the
// metrics and both listeners. It returns an error when it cannot start or
// stops on a failure, and nil after a clean drain.
func Run(ctx context.Context, c Config) error {
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	log := c.Log
	registryReqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "restart_injector_registry_requests_total",
		Help: "HTTP requests to image registries made by entrypoint lookups (cache misses), by method and status code.",
	}, []string{"method", "code"})
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "restart_injector_entrypoint_lookups_total",
		Help: "Image entrypoint lookups, by whether the resolver's cache answered them (cache=hit) or the registry was asked (cache=miss).",
	}, []string{"cache"})
	metrics := NewMetrics(registryReqs, lookups)

	clientCAs, err := c.ClientCAs()
	if err != nil {
		return err
	}
	client, err := c.client()
	if err != nil {
		return err
	}

	opts := c.injectorOptions(client, log, registryReqs, lookups)

	certs := NewCertWatcher(c.CertDir, log, func(t time.Time) { metrics.CertExpiry.Set(float64(t.Unix())) })
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if err := c.startCertificates(ctx, client, certs, log); err != nil {
		return err
	}

	h := c.handler(ctx, client, opts, metrics, log)

	mutateLn, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("admission endpoint: %w", err)
	}
	healthLn, err := net.Listen("tcp", c.HealthListen)
	if err != nil {
		mutateLn.Close()
		return fmt.Errorf("health endpoint: %w", err)
	}
	limit, from, err := MemoryLimit()
	if err != nil {
		log.Warn("memory limit unknown; sizing as without one", "err", err)
	}
	tuned := TuneMemory(limit)
	inFlight := c.MaxInFlight
	if inFlight == 0 {
		inFlight = MaxInFlightFor(limit)
	}
	log.Info("memory", "limit", limit, "from", from, "goMemLimit", tuned.SoftLimit, "gogc", tuned.GCPercent, "maxInFlight", inFlight)
	srv := &Server{Handler: h, Certs: certs, Metrics: metrics, Log: log, ClientCAs: clientCAs,
		ShutdownDelay: c.ShutdownDelay, ShutdownTimeout: c.ShutdownTimeout, MaxInFlight: inFlight}
	log.Info("restart-injector starting", "version", contract.Version, "certMode", c.CertMode,
		"native", c.Native, "delivery", c.Delivery, "onEntrypointError", c.OnEntrypointError, "registryLookup", c.RegistryLookup,
		"insecureRegistries", c.InsecureRegistries, "allowedRegistries", c.AllowedRegistries, "clientCA", c.ClientCAFile != "")
	return srv.Serve(ctx, mutateLn, healthLn)
}

// injectorOptions are the mutation's options: the images and volumes from
// the flags and, with registry lookups on, a resolver whose requests and
// cache answers the two counters count.
func (c Config) injectorOptions(client kubernetes.Interface, log *slog.Logger, registryReqs, lookups *prometheus.CounterVec) injector.Options {
	opts := injector.Options{
		SupervisorImage: c.SupervisorImage,
		ImagePullPolicy: c.ImagePullPolicy,
		PlatformUID:     c.PlatformUID,
		VolumeMedium:    c.VolumeMedium,
		Backoff:         c.Backoff,
		PullSecrets:     c.SupervisorPullSecrets,
	}
	if c.Delivery == DeliveryImage {
		opts.Delivery = injector.DeliveryImage
	}
	if c.RegistryLookup {
		ropts := registry.Options{
			Timeout:            c.LookupTimeout,
			Transport:          countingTransport{next: http.DefaultTransport, reqs: registryReqs},
			InsecureRegistries: c.InsecureRegistries,
			AllowedRegistries:  c.AllowedRegistries,
			Observe: func(hit bool) {
				if hit {
					lookups.WithLabelValues("hit").Inc()
				} else {
					lookups.WithLabelValues("miss").Inc()
				}
			},
		}
		if client != nil {
			ropts.PullSecrets = PullSecretReader(client, log)
		}
		opts.Resolver = registry.New(ropts)
	}

	return opts
}

// startCertificates issues and maintains the serving certificate in
// CertSelf mode, loads it (a missing one leaves the webhook up and not
// ready) and watches its files for as long as ctx lives.
func (c Config) startCertificates(ctx context.Context, client kubernetes.Interface, certs *CertWatcher, log *slog.Logger) error {
	if c.CertMode == CertSelf {
		sm := &SelfManaged{
			Client: client, Namespace: c.Namespace, CASecret: c.CASecret, WebhookConfig: c.WebhookConfig,
			DNSNames: ServiceDNSNames(c.Service, c.Namespace), Dir: c.CertDir,
		}
		for _, san := range c.ExtraSANs {
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

	return nil
}

// handler is the admission handler, with native-mode detection (and the
// self-narrowing it drives) started when there is an API server to ask.
func (c Config) handler(ctx context.Context, client kubernetes.Interface, opts injector.Options, metrics *Metrics, log *slog.Logger) *Handler {
	h := &Handler{
		Mutator:    injector.New(opts),
		Entrypoint: c.OnEntrypointError,
		Native:     c.Native,
		Metrics:    metrics,
		Log:        log,
	}
	// What the cluster supports, checked at start and every NativeInterval
	// in one loop, one check after the other: the native fields (and the
	// self-narrowing their conclusion drives), then image volumes.
	var checks []func(context.Context)
	if client != nil && c.Namespace != "" {
		// Also outside auto mode: whether the API server keeps the fields
		// decides if workload templates need the annotation carrier.
		d := &NativeDetector{Client: client, Namespace: c.Namespace, Log: log}
		h.Fields = d
		h.KubeVersion = d.ValidationVersionFor
		if h.Native == NativeAuto {
			d.Metrics = metrics
			h.NativeState = d
			if c.NarrowSelf != "" {
				n := &SelfNarrower{Client: client, WebhookConfig: c.NarrowSelf, Log: log}
				d.OnConclusion = n.NarrowOnConclusion
			}
		}
		checks = append(checks, d.Update)
	}
	if h.Native != NativeAuto {
		metrics.NativeHonoured.Set(map[bool]float64{true: 1}[h.Native == NativeOn])
	}
	metrics.ImageVolume.Set(map[bool]float64{true: 1}[c.Delivery == DeliveryImage])
	if c.Delivery == DeliveryAuto {
		if client != nil && c.Namespace != "" {
			d := &ImageVolumeDetector{Client: client, Namespace: c.Namespace, Image: opts.SupervisorImage,
				Log: log, Gauge: metrics.ImageVolume}
			h.Delivery = d.Delivery
			checks = append(checks, d.Update)
		} else {
			log.Warn("delivery auto: no API server or namespace to ask whether the cluster mounts image volumes; every pod gets the install container")
		}
	}
	if len(checks) > 0 {
		go repeatEvery(ctx, c.NativeInterval, func() {
			for _, check := range checks {
				check(ctx)
			}
		})
	}
	return h
}

// client connects to the API server when Run needs it at all: a
// files-mode webhook with native mode off and no registry lookups runs
// without any RBAC. A nil client without error means it is not needed, or
// is only wanted for pull secrets and not available.
func (c Config) client() (kubernetes.Interface, error) {
	required := c.CertMode == CertSelf || c.Native == NativeAuto
	if !required && !c.RegistryLookup && c.Delivery != DeliveryAuto {
		return nil, nil
	}
	var cfg *rest.Config
	var err error
	if c.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		if required {
			return nil, fmt.Errorf("API access (needed by self-managed certificates and native auto mode): %w", err)
		}
		c.Log.Warn("no API access: registry lookups will not use the pods' imagePullSecrets, and delivery auto copies the binaries", "err", err)
		return nil, nil
	}
	cfg.UserAgent = "restart-injector/" + contract.Version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return client, nil
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

// startSelfManaged retries the first CA/caBundle round for a while: at
// install time the API server may still be creating the Role binding.
func startSelfManaged(ctx context.Context, sm *SelfManaged, log *slog.Logger) (KeyPair, KeyPair, error) {
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
			return KeyPair{}, KeyPair{}, fmt.Errorf("self-managed certificates: %w", err)
		}
		log.Warn("self-managed certificates: retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 15*time.Second)
	}
}
