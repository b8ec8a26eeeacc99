package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Review results, the values of the "result" label.
const (
	ResultInjected  = "injected"  // allowed with a patch
	ResultUntouched = "untouched" // allowed, no patch (no rules, already injected, native mode)
	ResultWarned    = "warned"    // allowed uninjected because the entrypoint could not be resolved
	ResultDenied    = "denied"    // allowed=false: invalid rules, unresolvable entrypoint in deny mode
	ResultBadInput  = "bad_request"
	ResultBusy      = "busy" // 429: as many reviews in flight as the memory holds (Server.MaxInFlight)
)

// Metrics are the server's Prometheus collectors, kept in their own registry
// so tests can read them and several servers can live in one process.
type Metrics struct {
	Registry       *prometheus.Registry
	Reviews        *prometheus.CounterVec
	Latency        prometheus.Histogram
	NativeHonoured prometheus.Gauge
	// ImageVolume is 1 while injected pods get the image volume.
	ImageVolume prometheus.Gauge
	CertExpiry  prometheus.Gauge
}

// NewMetrics creates and registers the collectors. extra collectors (for
// example the image lookup cache counters) are registered alongside.
func NewMetrics(extra ...prometheus.Collector) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "restart_injector_admission_reviews_total",
			Help: "AdmissionReviews answered, by result.",
		}, []string{"result"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "restart_injector_admission_duration_seconds",
			Help: "Time from request received to response written for /mutate, including any image lookup.",
			// From 100µs (cached, in-process) to 10s (the webhook timeout).
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		NativeHonoured: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "restart_injector_native_restart_rules",
			Help: "1 when the injector leaves pods alone because the cluster honours restartPolicyRules itself, else 0.",
		}),
		ImageVolume: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "restart_injector_image_volume_delivery",
			Help: "1 while injected pods get the supervisor as an image volume, 0 while they get the install init container.",
		}),
		CertExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "restart_injector_serving_certificate_expiry_timestamp_seconds",
			Help: "NotAfter of the serving certificate currently loaded, in Unix seconds.",
		}),
	}
	m.Registry.MustRegister(m.Reviews, m.Latency, m.NativeHonoured, m.ImageVolume, m.CertExpiry,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{ResultInjected, ResultUntouched, ResultWarned, ResultDenied, ResultBadInput, ResultBusy} {
		m.Reviews.WithLabelValues(r) // export zeros so rate() works from the first scrape
	}
	for _, c := range extra {
		m.Registry.MustRegister(c)
	}
	return m
}
