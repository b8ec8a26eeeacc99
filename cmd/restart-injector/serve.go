package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

func runServe(ctx context.Context, args []string, stderr io.Writer) int {
	fs := newFlagSet("serve")
	var c webhook.Config
	fs.StringVar(&c.Listen, "listen", ":8443", "`ADDR` of the HTTPS admission endpoint (/mutate)")
	fs.StringVar(&c.HealthListen, "health-listen", ":8081", "`ADDR` of the plain-HTTP /healthz, /readyz and /metrics endpoint")
	fs.StringVar(&c.CertDir, "cert-dir", "/etc/restart-injector/tls", "`DIR` holding tls.crt and tls.key (reloaded on change)")
	certMode := fs.String("cert-mode", "files", "`MODE`: files (a mounted Secret, e.g. from cert-manager) or self (create a CA and patch the webhook's caBundle)")
	selfSigned := fs.Bool("self-signed", false, "shorthand for --cert-mode=self")
	fs.StringVar(&c.Namespace, "namespace", "", "`NAMESPACE` of the webhook (default: $POD_NAMESPACE, then the service account's namespace)")
	fs.StringVar(&c.Service, "service", "restart-injector", "`NAME` of the webhook's Service (self mode: the certificate's DNS names)")
	fs.StringVar(&c.WebhookConfig, "webhook-config", "restart-injector", "`NAME` of the MutatingWebhookConfiguration whose caBundle self mode patches")
	fs.StringVar(&c.CASecret, "ca-secret", "restart-injector-ca", "`NAME` of the Secret that self mode keeps its CA in")
	extraSANs := fs.String("extra-sans", "", "comma-separated extra DNS names and IP addresses for the self-managed certificate")
	native := fs.String("native", "auto", "`MODE`: off (always inject), auto (leave pods alone once the cluster honours restartPolicyRules), on (never inject)")
	fs.DurationVar(&c.NativeInterval, "native-interval", 5*time.Minute, "how often --native=auto re-checks the cluster")
	fs.StringVar(&c.NarrowSelf, "narrow-self", "", "with --native=auto: `NAME` of the webhook's own MutatingWebhookConfiguration, whose pods webhook is narrowed to pods with the rules annotation while every node honours the features natively (needs get and patch on it)")
	onEntrypointError := fs.String("on-entrypoint-error", "deny", "`POLICY` when an image entrypoint cannot be resolved: deny, or allow (admit without the supervisor, with a warning)")
	fs.BoolVar(&c.RegistryLookup, "registry-lookup", true, "look up the entrypoint of images for containers without command")
	fs.DurationVar(&c.LookupTimeout, "lookup-timeout", 5*time.Second, "bound of one registry lookup (keep it below the webhook's timeoutSeconds)")
	var insecure, allowed registryList
	registryFlags(fs, &insecure, &allowed)
	fs.StringVar(&c.ClientCAFile, "client-ca-file", "", "PEM `FILE` of CAs: /mutate then requires a client certificate signed by one of them (the API server's, see docs/webhook.md)")
	fs.StringVar(&c.SupervisorImage, "supervisor-image", "", "`IMAGE` of the install init container (default "+injector.DefaultSupervisorImage()+")")
	fs.BoolVar(&c.PlatformUID, "platform-uid", false, "name no runAsUser in the install init container: the platform assigns the UID (OpenShift's restricted-v2 SCC)")
	pullPolicy := fs.String("image-pull-policy", "", "imagePullPolicy of the install init container, or pullPolicy of the image volume (default: the API server's)")
	delivery := fs.String("delivery", "auto", "`HOW` injected pods get the binaries: copy (an install init container), image (the supervisor image as an image volume: Kubernetes 1.35+, containerd 2.1+ or CRI-O 1.31+ on every node), or auto (image once the API server, every kubelet and every runtime are seen to support it; copy until then and without API access)")
	var pullSecrets nameList
	fs.Var(&pullSecrets, "supervisor-pull-secret", "`NAME` of a Secret added to every injected pod's imagePullSecrets, to pull the supervisor image; repeatable or comma-separated; it must exist in each pod's namespace")
	volumeMedium := fs.String("volume-medium", "", "`MEDIUM` of the injected emptyDirs: \"\" (node disk) or Memory")
	backoffFlags(fs, &c.Backoff)
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "`FILE` for API access outside a cluster (default: in-cluster config)")
	logFormat := fs.String("log-format", "json", "log `FORMAT`: json or text")
	logLevel := fs.String("log-level", "info", "log `LEVEL`: debug, info, warn, error")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", 5*time.Second, "keep serving this long after SIGTERM while reporting not ready")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "bound of the drain of in-flight reviews")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", 0, "`N` reviews answered at once, 429 beyond (0: from the memory limit, $"+webhook.EnvMemoryLimit+" or cgroup memory.max; negative: no bound)")
	if code, ok := parseFlags(fs, "serve", args, "usage: restart-injector serve [flags]\n\nRun the mutating admission webhook.\n", stderr); !ok {
		return code
	}
	var extra, conflict error
	if fs.NArg() > 0 {
		extra = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *selfSigned {
		if *certMode != "files" && *certMode != "self" {
			conflict = fmt.Errorf("--self-signed conflicts with --cert-mode=%s", *certMode)
		}
		*certMode = "self"
	}
	var level slog.Level
	if c.Namespace == "" {
		c.Namespace = webhook.PodNamespace()
	}
	if err := cmp.Or(extra, conflict,
		oneOf("cert-mode", *certMode, "files", "self"),
		oneOf("native", *native, "off", "auto", "on"),
		oneOf("delivery", *delivery, "auto", "copy", "image"),
		oneOf("on-entrypoint-error", *onEntrypointError, "deny", "allow"),
		// Empty, the API server's default, is accepted without being offered.
		oneOf("image-pull-policy", cmp.Or(*pullPolicy, "Always"), "Always", "IfNotPresent", "Never"),
		oneOf("volume-medium", *volumeMedium, "", "Memory"),
		oneOf("log-format", *logFormat, "json", "text"),
		wrap("--log-level", level.UnmarshalText([]byte(*logLevel))),
		needNamespace(c.Namespace, *certMode, *native),
		narrowNeedsAuto(c.NarrowSelf, *native),
	); err != nil {
		fmt.Fprintf(stderr, "restart-injector serve: %v\n", err)
		return exitUsage
	}
	c.CertMode, c.Native = webhook.CertMode(*certMode), webhook.NativeMode(*native)
	c.Delivery, c.SupervisorPullSecrets = webhook.DeliveryMode(*delivery), pullSecrets
	c.InsecureRegistries, c.AllowedRegistries = insecure, allowed
	c.OnEntrypointError = webhook.EntrypointPolicy(*onEntrypointError)
	c.ImagePullPolicy, c.VolumeMedium = corev1.PullPolicy(*pullPolicy), corev1.StorageMedium(*volumeMedium)
	if *extraSANs != "" {
		c.ExtraSANs = strings.Split(*extraSANs, ",")
	}
	opts := &slog.HandlerOptions{Level: level}
	c.Log = slog.New(slog.NewJSONHandler(stderr, opts))
	if *logFormat == "text" {
		c.Log = slog.New(slog.NewTextHandler(stderr, opts))
	}
	if img := cmp.Or(c.SupervisorImage, injector.DefaultSupervisorImage()); injector.UnpinnedImage(img) != "" {
		c.Log.Warn(injector.UnpinnedWarning(img, injector.UnpinnedImage(img)), "image", img)
	}
	if err := webhook.Run(ctx, c); err != nil {
		c.Log.Error("restart-injector serve failed", "err", err)
		return exitFailure
	}
	return exitOK
}

// needNamespace reports the namespace missing where the settings use it.
func needNamespace(namespace, certMode, native string) error {
	if namespace == "" && (certMode == "self" || native == "auto") {
		return errors.New("--namespace is required outside a pod (self-managed certificates and --native=auto use it)")
	}
	return nil
}

func wrap(prefix string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %v", prefix, err)
	}
	return nil
}

// oneOf checks the value of a flag against those it accepts.
func oneOf(flag, value string, accepted ...string) error {
	for _, a := range accepted {
		if value == a {
			return nil
		}
	}
	quoted := make([]string, len(accepted))
	for i, a := range accepted {
		quoted[i] = a
		if a == "" {
			quoted[i] = `""`
		}
	}
	return fmt.Errorf("--%s: %q is not one of %s", flag, value, strings.Join(quoted, ", "))
}

// narrowNeedsAuto: --narrow-self acts on --native=auto's conclusions.
func narrowNeedsAuto(narrow, native string) error {
	if narrow != "" && native != "auto" {
		return fmt.Errorf("--narrow-self needs --native=auto (it acts on its conclusions), not --native=%s", native)
	}
	return nil
}
