package rules

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one validation failure. Its text is byte-for-byte what
// k8s.io/apimachinery's field.Error prints for the API server of the
// KubeVersion validated against (the newest by default), so a user sees the
// same message from the supervisor, the injector and that API server.
type FieldError struct {
	Field string // path such as spec.containers[0].restartPolicyRules[1].action
	Body  string // such as `Unsupported value: "Foo": supported values: "In", "NotIn"`
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Body }

// ErrorList is the result of a validation; nil means valid.
type ErrorList []*FieldError

// Error joins the messages on one line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Err returns the list as an error, or nil when it is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

func join(prefix, child string) string {
	if prefix == "" {
		return child
	}
	return prefix + "." + child
}

func required(field, detail string) *FieldError {
	return &FieldError{field, withDetail("Required value", detail)}
}

func forbidden(field, detail string) *FieldError {
	return &FieldError{field, withDetail("Forbidden", detail)}
}

// withDetail appends ": detail" unless detail is empty, as field.Error's
// ErrorBody does.
func withDetail(s, detail string) string {
	if detail == "" {
		return s
	}
	return s + ": " + detail
}

// quoteValue renders a bad value as field.Error does. The API server passes
// its named string types (ContainerRestartRuleAction, ...), which ErrorBody
// does not take for a string and encodes with encoding/json: `"a\u003cb"`
// where strconv.Quote would give `"a<b"`.
func quoteValue(value string) string {
	b, _ := json.Marshal(value)
	return string(b)
}

func notSupported(field, value string, supported string) *FieldError {
	return &FieldError{field, fmt.Sprintf("Unsupported value: %s: supported values: %s", quoteValue(value), supported)}
}

// tooMany reports a list longer than max in the words of the release:
// field.TooMany from 1.36, field.TooLong before.
func tooMany(ck checks, field string, actual, max int) *FieldError {
	if !ck.tooMany {
		return &FieldError{field, fmt.Sprintf("Too long: may not be more than %d bytes", max)}
	}
	return &FieldError{field, fmt.Sprintf("Too many: %d: must have at most %d items", actual, max)}
}

func quoteAll(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// Validate checks a regular container's restart fields like the newest
// release's API server; see KubeVersion.Validate.
func Validate(c Container, path string) ErrorList { return NewestKube.Validate(c, path) }

// ValidateInit checks an init container's restart fields like the newest
// release's API server; see KubeVersion.ValidateInit.
func ValidateInit(c Container, path string) ErrorList { return NewestKube.ValidateInit(c, path) }

// Validate checks a regular container's restart fields the way the API
// server of release v does (validateContainers calling
// validateContainerRestartPolicy, validation.go:3967-3968@v1.34.4,
// :4059-4060@v1.35.4, :4061-4062@v1.36.3) with ContainerRestartRules on.
// path is the container's field path ("" for a bare supervisor config).
func (v KubeVersion) Validate(c Container, path string) ErrorList {
	return validateContainer(v.checks(), c, path)
}

// ValidateInit checks an init container's restart fields the way the API
// server of release v does (validateInitContainerRestartPolicy,
// validation.go:3242-3269@v1.34.4, :3317-3348@v1.35.4, :3310-3341@v1.36.3):
// a sidecar (restartPolicy Always) may carry rules only from 1.36, and
// rules without a restartPolicy are refused from 1.35 and pass unchecked
// in 1.34.
func (v KubeVersion) ValidateInit(c Container, path string) ErrorList {
	ck := v.checks()
	if c.RestartPolicy == nil {
		if ck.initWithoutPolicy && len(c.RestartPolicyRules) > 0 {
			return ErrorList{required(join(path, "restartPolicy"), "must specify restartPolicy when restart rules are used")}
		}
		return nil
	}
	if *c.RestartPolicy == Always && !ck.restartAll {
		if len(c.RestartPolicyRules) > 0 {
			return ErrorList{forbidden(join(path, "restartPolicyRules"), "restartPolicyRules are not allowed for init containers with restart policy Always")}
		}
		return nil
	}
	return validateContainer(ck, c, path)
}

// ValidateCarried is Validate for rules the API server never sees: the
// supervisor's config and the restart-supervisor.dev/rules annotation,
// where this project's own action RestartGroup is accepted too, on a
// regular container (an init container's rules are checked by
// ValidateInit, which refuses it).
func (v KubeVersion) ValidateCarried(c Container, path string) ErrorList {
	ck := v.checks()
	ck.groupAction = true
	return validateContainer(ck, c, path)
}

// validateContainer is validateContainerRestartPolicy.
func validateContainer(ck checks, c Container, path string) ErrorList {
	var errs ErrorList
	if c.RestartPolicy == nil {
		if len(c.RestartPolicyRules) == 0 {
			return nil
		}
		errs = append(errs, required(join(path, "restartPolicy"), "must specify restartPolicy when restart rules are used"))
	} else {
		switch *c.RestartPolicy {
		case Always, Never, OnFailure:
		default:
			errs = append(errs, notSupported(join(path, "restartPolicy"), string(*c.RestartPolicy), supportedPolicies))
		}
	}
	rulesPath := join(path, "restartPolicyRules")
	if n := len(c.RestartPolicyRules); n > MaxRules {
		errs = append(errs, tooMany(ck, rulesPath, n, MaxRules))
	}
	actions, listed := supportedActions[:1], supportedActions[:1]
	if ck.restartAll {
		actions = supportedActions
		if ck.actionListsAllowed {
			listed = supportedActions
		}
	}
	if ck.groupAction {
		actions = append(actions[:len(actions):len(actions)], string(ActionRestartGroup))
		listed = append(listed[:len(listed):len(listed)], string(ActionRestartGroup))
	}
	for i, r := range c.RestartPolicyRules {
		rp := fmt.Sprintf("%s[%d]", rulesPath, i)
		if !slices.Contains(actions, string(r.Action)) {
			errs = append(errs, notSupported(rp+".action", string(r.Action), quoteAll(listed)))
		}
		if r.ExitCodes == nil {
			errs = append(errs, required(rp+".exitCodes", "must be specified"))
			continue
		}
		switch r.ExitCodes.Operator {
		case OpIn, OpNotIn:
		default:
			errs = append(errs, notSupported(rp+".exitCodes.operator", string(r.ExitCodes.Operator), quoteAll(supportedOperators)))
		}
		if n := len(r.ExitCodes.Values); n > MaxValuesPerRule {
			errs = append(errs, tooMany(ck, rp+".exitCodes.values", n, MaxValuesPerRule))
		}
	}
	return errs
}

// ValidatePodPolicy checks a pod restartPolicy the way the API server does.
func ValidatePodPolicy(p RestartPolicy, field string) ErrorList {
	switch p {
	case Always, OnFailure, Never:
		return nil
	case "":
		return ErrorList{required(field, "")}
	}
	return ErrorList{notSupported(field, string(p), "\"Always\", \"OnFailure\", \"Never\"")}
}
