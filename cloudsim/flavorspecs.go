package cloudsim

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strconv"
)

// Nova's flavor extra specs (os-extra_specs): anyone who sees a flavor
// reads them, an admin writes them, as Zed's default policy has it.

// extraSpecKeyRE is Nova's schema for an extra spec's key.
var extraSpecKeyRE = regexp.MustCompile(`^[a-zA-Z0-9-_:. ]{1,255}$`)

func (s *Sim) flavorExtraSpecs(mux func(string, func(http.ResponseWriter, *request, int))) {
	mux("GET /compute/v2.1/flavors/{id}/os-extra_specs", s.listExtraSpecs)
	mux("POST /compute/v2.1/flavors/{id}/os-extra_specs", s.createExtraSpecs)
	mux("GET /compute/v2.1/flavors/{id}/os-extra_specs/{key}", s.getExtraSpec)
	mux("PUT /compute/v2.1/flavors/{id}/os-extra_specs/{key}", s.updateExtraSpec)
	mux("DELETE /compute/v2.1/flavors/{id}/os-extra_specs/{key}", s.deleteExtraSpec)
}

// extraSpecsFlavor is the request's flavor, or an answer that it is not
// one, or that the caller may not write (write: the policy's create,
// update or delete).
func extraSpecsFlavor(rw http.ResponseWriter, r *request, write string) *flavor {
	if write != "" && !r.tok.admin() {
		novaError(rw, http.StatusForbidden, "Policy doesn't allow os_compute_api:os-flavor-extra-specs:"+write+" to be performed.")
		return nil
	}
	f := r.w.Flavors[r.PathValue("id")]
	if f == nil {
		novaError(rw, http.StatusNotFound, "Flavor "+r.PathValue("id")+" could not be found.")
	}
	return f
}

func (s *Sim) listExtraSpecs(rw http.ResponseWriter, r *request, _ int) {
	if f := extraSpecsFlavor(rw, r, ""); f != nil {
		writeJSON(rw, http.StatusOK, map[string]any{"extra_specs": f.specs()})
	}
}

func (s *Sim) getExtraSpec(rw http.ResponseWriter, r *request, _ int) {
	f := extraSpecsFlavor(rw, r, "")
	if f == nil {
		return
	}
	key := r.PathValue("key")
	v, ok := f.ExtraSpecs[key]
	if !ok {
		noSuchSpec(rw, f, key)
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{key: v})
}

func (s *Sim) createExtraSpecs(rw http.ResponseWriter, r *request, _ int) {
	f := extraSpecsFlavor(rw, r, "create")
	if f == nil {
		return
	}
	var body struct {
		ExtraSpecs map[string]json.RawMessage `json:"extra_specs"`
	}
	if err := decodeBody(r, &body); err != nil || body.ExtraSpecs == nil {
		novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute extra_specs. Value: None. None is not of type 'object'")
		return
	}
	specs, msg := extraSpecValues(body.ExtraSpecs)
	if msg != "" {
		novaError(rw, http.StatusBadRequest, msg)
		return
	}
	f.setSpecs(specs)
	writeJSON(rw, http.StatusOK, map[string]any{"extra_specs": specs})
}

func (s *Sim) updateExtraSpec(rw http.ResponseWriter, r *request, _ int) {
	f := extraSpecsFlavor(rw, r, "update")
	if f == nil {
		return
	}
	var body map[string]json.RawMessage
	if err := decodeBody(r, &body); err != nil {
		novaError(rw, http.StatusBadRequest, err.Error())
		return
	}
	key := r.PathValue("key")
	if len(body) > 1 {
		novaError(rw, http.StatusBadRequest, "Request body contains too many items")
		return
	}
	if _, ok := body[key]; !ok {
		novaError(rw, http.StatusBadRequest, "Request body and URI mismatch")
		return
	}
	specs, msg := extraSpecValues(body)
	if msg != "" {
		novaError(rw, http.StatusBadRequest, msg)
		return
	}
	f.setSpecs(specs)
	writeJSON(rw, http.StatusOK, map[string]any{key: specs[key]})
}

func (s *Sim) deleteExtraSpec(rw http.ResponseWriter, r *request, _ int) {
	f := extraSpecsFlavor(rw, r, "delete")
	if f == nil {
		return
	}
	key := r.PathValue("key")
	if _, ok := f.ExtraSpecs[key]; !ok {
		noSuchSpec(rw, f, key)
		return
	}
	delete(f.ExtraSpecs, key)
	rw.WriteHeader(http.StatusOK)
}

// extraSpecValues checks specs against Nova's schema (keys of 1 to 255
// of its characters; a value a string, number or boolean of up to 255
// characters, kept as its string) and returns them as Nova stores them.
func extraSpecValues(in map[string]json.RawMessage) (map[string]string, string) {
	out := make(map[string]string, len(in))
	for k, raw := range in {
		if !extraSpecKeyRE.MatchString(k) {
			return nil, "Invalid input for field/attribute extra_specs. Value: " + k + ". Additional properties are not allowed"
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err.Error()
		}
		var str string
		switch v := v.(type) {
		case string:
			str = v
		case float64:
			str = strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			str = strconv.FormatBool(v)
		default:
			return nil, fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. %s is not of type 'string', 'integer', 'number', 'boolean'", k, raw, raw)
		}
		if len(str) > 255 {
			return nil, fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. %q is too long", k, str, str)
		}
		out[k] = str
	}
	return out, ""
}

func noSuchSpec(rw http.ResponseWriter, f *flavor, key string) {
	novaError(rw, http.StatusNotFound, "Flavor "+f.ID+" has no extra specs with key "+key+".")
}

// setSpecs sets (adds or replaces) the flavor's extra specs of specs.
func (f *flavor) setSpecs(specs map[string]string) {
	if f.ExtraSpecs == nil {
		f.ExtraSpecs = map[string]string{}
	}
	maps.Copy(f.ExtraSpecs, specs)
}

// specs is what a flavor's extra_specs shows: never null.
func (f *flavor) specs() map[string]string {
	if f.ExtraSpecs == nil {
		return map[string]string{}
	}
	return maps.Clone(f.ExtraSpecs)
}
