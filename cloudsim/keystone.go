package cloudsim

import (
	"crypto/subtle"
	"net/http"
	"slices"
	"time"
)

type project struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	DomainID string `json:"domain_id"`
	Enabled  bool   `json:"enabled"`
}

type user struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Password  string   `json:"password"`
	DomainID  string   `json:"domain_id"`
	ProjectID string   `json:"project_id"`
	Roles     []string `json:"roles"`
}

type appCred struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Description  string     `json:"description"`
	Secret       string     `json:"secret"`
	UserID       string     `json:"user_id"`
	ProjectID    string     `json:"project_id"`
	Roles        []string   `json:"roles"`
	Unrestricted bool       `json:"unrestricted"`
	ExpiresAt    *time.Time `json:"expires_at"`
}

type token struct {
	ID        string    `json:"id"`
	UserID    string    `json:"user_id"`
	ProjectID string    `json:"project_id"`
	Methods   []string  `json:"methods"`
	Roles     []string  `json:"roles"`
	AppCredID string    `json:"app_cred_id,omitempty"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (t *token) admin() bool { return slices.Contains(t.Roles, "admin") }

// impliedRoles are the role implications keystone-manage bootstrap makes:
// admin implies member, member implies reader. A user's token lists the
// roles its roles imply, as Keystone's do (its effective assignments); an
// application credential's token lists the credential's roles as they were
// named, without what they imply (Zed's token model; the contract suite's
// "roles of a credential" holds this to a real Keystone).
var impliedRoles = map[string]string{"admin": "member", "member": "reader"}

// withImplied is roles with the ones they imply, sorted, each once.
func withImplied(roles []string) []string {
	out := slices.Clone(roles)
	for i := 0; i < len(out); i++ {
		if next, ok := impliedRoles[out[i]]; ok && !slices.Contains(out, next) {
			out = append(out, next)
		}
	}
	slices.Sort(out)
	return out
}

// authenticate returns the token named by the X-Auth-Token header while it
// is valid.
func (w *world) authenticate(id string, now time.Time) (*token, bool) {
	t, ok := w.Tokens[id]
	if !ok || id == "" || !now.Before(t.ExpiresAt) {
		return nil, false
	}
	if t.AppCredID != "" {
		if _, live := w.AppCreds[t.AppCredID]; !live {
			return nil, false // deleting an application credential revokes its tokens
		}
	}
	return t, true
}

func (s *Sim) keystoneRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /identity", s.identityVersions)
	mux.HandleFunc("GET /identity/{$}", s.identityVersions)
	mux.HandleFunc("GET /identity/v3", s.identityV3)
	mux.HandleFunc("GET /identity/v3/{$}", s.identityV3)
	// Any other path: Keystone's 404 (its routes are matched before a
	// token is asked for).
	mux.HandleFunc("/identity/", func(rw http.ResponseWriter, r *http.Request) {
		writeJSON(rw, http.StatusNotFound, map[string]any{"error": map[string]any{"code": 404, "title": "Not Found",
			"message": "The resource could not be found."}})
	})
	s.routeAuth(mux, "POST /identity/v3/auth/tokens", false, s.issueToken)
	s.route(mux, "GET /identity/v3/auth/tokens", s.validateToken)
	s.route(mux, "HEAD /identity/v3/auth/tokens", s.validateToken)
	s.route(mux, "DELETE /identity/v3/auth/tokens", s.revokeToken)
	s.route(mux, "GET /identity/v3/auth/catalog", s.getCatalog)
	s.route(mux, "GET /identity/v3/users/{user_id}", s.getUser)
	s.route(mux, "GET /identity/v3/projects/{project_id}", s.getProject)
	s.route(mux, "POST /identity/v3/users/{user_id}/application_credentials", s.createAppCred)
	s.route(mux, "GET /identity/v3/users/{user_id}/application_credentials", s.listAppCreds)
	s.route(mux, "GET /identity/v3/users/{user_id}/application_credentials/{id}", s.getAppCred)
	s.route(mux, "DELETE /identity/v3/users/{user_id}/application_credentials/{id}", s.deleteAppCred)
}

func (s *Sim) identityVersion(r *http.Request) map[string]any {
	return map[string]any{
		"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
		"links":       []any{map[string]any{"rel": "self", "href": requestBase(r, s) + "/identity/v3/"}},
		"media-types": []any{map[string]any{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}},
	}
}

func (s *Sim) identityVersions(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusMultipleChoices, map[string]any{"versions": map[string]any{"values": []any{s.identityVersion(r)}}})
}

func (s *Sim) identityV3(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{"version": s.identityVersion(r)})
}

// authRequest is the body of POST /v3/auth/tokens, the parts the simulator reads.
type authRequest struct {
	Auth struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password struct {
				User authUser `json:"user"`
			} `json:"password"`
			ApplicationCredential struct {
				ID     string   `json:"id"`
				Name   string   `json:"name"`
				Secret string   `json:"secret"`
				User   authUser `json:"user"`
			} `json:"application_credential"`
			Token struct {
				ID string `json:"id"`
			} `json:"token"`
		} `json:"identity"`
		Scope *struct {
			Project *struct {
				ID     string    `json:"id"`
				Name   string    `json:"name"`
				Domain authNamed `json:"domain"`
			} `json:"project"`
		} `json:"scope"`
	} `json:"auth"`
}

type authUser struct {
	ID       string    `json:"id"`
	Name     string    `json:"name"`
	Password string    `json:"password"`
	Domain   authNamed `json:"domain"`
}

type authNamed struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func keystoneError(rw http.ResponseWriter, code int, title, msg string) {
	writeJSON(rw, code, map[string]any{"error": map[string]any{"code": code, "title": title, "message": msg}})
}

func (s *Sim) issueToken(rw http.ResponseWriter, r *request) {
	var req authRequest
	if err := decodeBody(r, &req); err != nil {
		keystoneError(rw, http.StatusBadRequest, "Bad Request", err.Error())
		return
	}
	id := req.Auth.Identity
	w := r.w
	var u *user
	var ac *appCred
	switch {
	case slices.Contains(id.Methods, "password"):
		u = w.findUser(id.Password.User)
		if u == nil || subtle.ConstantTimeCompare([]byte(u.Password), []byte(id.Password.User.Password)) != 1 {
			keystoneError(rw, http.StatusUnauthorized, "Unauthorized", "The request you have made requires authentication.")
			return
		}
	case slices.Contains(id.Methods, "application_credential"):
		c := id.ApplicationCredential
		for _, cand := range w.AppCreds {
			owner := w.Users[cand.UserID]
			if cand.ID == c.ID || (c.ID == "" && cand.Name == c.Name && owner != nil && w.findUser(c.User) == owner) {
				ac = cand
			}
		}
		if ac == nil || subtle.ConstantTimeCompare([]byte(ac.Secret), []byte(c.Secret)) != 1 ||
			(ac.ExpiresAt != nil && !r.now.Before(*ac.ExpiresAt)) {
			keystoneError(rw, http.StatusUnauthorized, "Unauthorized", "The request you have made requires authentication.")
			return
		}
		u = w.Users[ac.UserID]
	case slices.Contains(id.Methods, "token"):
		old, ok := w.authenticate(id.Token.ID, r.now)
		if !ok {
			keystoneError(rw, http.StatusUnauthorized, "Unauthorized", "The request you have made requires authentication.")
			return
		}
		u = w.Users[old.UserID]
	default:
		keystoneError(rw, http.StatusUnauthorized, "Unauthorized", "Unsupported authentication method.")
		return
	}
	projectID := u.ProjectID
	if ac != nil {
		projectID = ac.ProjectID
	} else if sc := req.Auth.Scope; sc != nil && sc.Project != nil {
		p := w.findProject(sc.Project.ID, sc.Project.Name)
		if p == nil || p.ID != u.ProjectID {
			keystoneError(rw, http.StatusUnauthorized, "Unauthorized", "User has no access to project.")
			return
		}
		projectID = p.ID
	}
	t := &token{ID: "gAAAAA" + newSecret(32), UserID: u.ID, ProjectID: projectID, Methods: id.Methods,
		Roles: u.Roles, IssuedAt: r.now.UTC(), ExpiresAt: r.now.Add(r.s.opts.TokenTTL).UTC()}
	if ac != nil {
		t.AppCredID, t.Roles = ac.ID, slices.Clone(ac.Roles)
	} else {
		t.Roles = withImplied(t.Roles)
	}
	w.Tokens[t.ID] = t
	w.expireTokens(r.now)
	rw.Header().Set("X-Subject-Token", t.ID)
	writeJSON(rw, http.StatusCreated, map[string]any{"token": r.s.tokenBody(w, t)})
}

// expireTokens forgets tokens past expiry, so the state stays small.
func (w *world) expireTokens(now time.Time) {
	for id, t := range w.Tokens {
		if !now.Before(t.ExpiresAt) {
			delete(w.Tokens, id)
		}
	}
}

func (w *world) findUser(u authUser) *user {
	for _, cand := range w.Users {
		if cand.ID == u.ID || (u.ID == "" && cand.Name == u.Name) {
			return cand
		}
	}
	return nil
}

func (w *world) findProject(id, name string) *project {
	for _, p := range w.Projects {
		if p.ID == id || (id == "" && p.Name == name) {
			return p
		}
	}
	return nil
}

func (s *Sim) tokenBody(w *world, t *token) map[string]any {
	u, p := w.Users[t.UserID], w.Projects[t.ProjectID]
	roles := make([]any, 0, len(t.Roles))
	for _, role := range t.Roles {
		roles = append(roles, map[string]any{"id": role, "name": role})
	}
	body := map[string]any{
		"methods": t.Methods, "audit_ids": []string{t.ID[6:28]},
		"issued_at": t.IssuedAt.Format("2006-01-02T15:04:05.000000Z"), "expires_at": t.ExpiresAt.Format("2006-01-02T15:04:05.000000Z"),
		"user":      map[string]any{"id": u.ID, "name": u.Name, "domain": map[string]any{"id": DefaultDomain, "name": "Default"}, "password_expires_at": nil},
		"project":   map[string]any{"id": p.ID, "name": p.Name, "domain": map[string]any{"id": DefaultDomain, "name": "Default"}},
		"roles":     roles,
		"catalog":   s.catalog(p.ID),
		"is_domain": false,
	}
	if t.AppCredID != "" {
		ac := w.AppCreds[t.AppCredID]
		body["application_credential"] = map[string]any{"id": ac.ID, "name": ac.Name, "restricted": !ac.Unrestricted}
	}
	return body
}

// catalog lists the simulated services: their public endpoints at
// PublicURL, the internal and admin ones at URL (the same address but
// with real hosts).
func (s *Sim) catalog(projectID string) []any {
	svc := func(typ, name, path string) map[string]any {
		var eps []any
		for _, iface := range []string{"public", "internal", "admin"} {
			base := s.URL()
			if iface == "public" {
				base = s.PublicURL()
			}
			eps = append(eps, map[string]any{"id": newHex(), "interface": iface, "region": RegionName, "region_id": RegionName, "url": base + path})
		}
		return map[string]any{"id": newHex(), "type": typ, "name": name, "endpoints": eps}
	}
	return []any{
		svc("identity", "keystone", "/identity"),
		svc("compute", "nova", "/compute/v2.1"),
		svc("image", "glance", "/image"),
		svc("network", "neutron", "/network"),
		svc("load-balancer", "octavia", "/load-balancer"),
		svc("volumev3", "cinderv3", "/volume/v3/"+projectID),
		svc("object-store", "swift", "/object-store/v1/AUTH_"+projectID),
	}
}

func (s *Sim) validateToken(rw http.ResponseWriter, r *request) {
	t, ok := r.w.authenticate(r.Header.Get("X-Subject-Token"), r.now)
	if !ok {
		keystoneError(rw, http.StatusNotFound, "Not Found", "Could not find token.")
		return
	}
	rw.Header().Set("X-Subject-Token", t.ID)
	writeJSON(rw, http.StatusOK, map[string]any{"token": r.s.tokenBody(r.w, t)})
}

func (s *Sim) revokeToken(rw http.ResponseWriter, r *request) {
	id := r.Header.Get("X-Subject-Token")
	if _, ok := r.w.Tokens[id]; !ok {
		keystoneError(rw, http.StatusNotFound, "Not Found", "Could not find token.")
		return
	}
	delete(r.w.Tokens, id)
	rw.WriteHeader(http.StatusNoContent)
}

func (s *Sim) getCatalog(rw http.ResponseWriter, r *request) {
	writeJSON(rw, http.StatusOK, map[string]any{"catalog": s.catalog(r.tok.ProjectID)})
}

func (s *Sim) getUser(rw http.ResponseWriter, r *request) {
	u, ok := r.w.Users[r.PathValue("user_id")]
	if !ok || (u.ID != r.tok.UserID && !r.tok.admin()) {
		keystoneError(rw, http.StatusNotFound, "Not Found", "Could not find user.")
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"user": map[string]any{"id": u.ID, "name": u.Name, "domain_id": u.DomainID,
		"default_project_id": u.ProjectID, "enabled": true, "password_expires_at": nil}})
}

func (s *Sim) getProject(rw http.ResponseWriter, r *request) {
	p, ok := r.w.Projects[r.PathValue("project_id")]
	if !ok || (p.ID != r.tok.ProjectID && !r.tok.admin()) {
		keystoneError(rw, http.StatusNotFound, "Not Found", "Could not find project.")
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"project": map[string]any{"id": p.ID, "name": p.Name, "domain_id": p.DomainID,
		"enabled": p.Enabled, "is_domain": false, "parent_id": p.DomainID, "description": "", "tags": []string{}}})
}

// ownUser checks that the path's user is the caller: Keystone lets users
// manage only their own application credentials.
func ownUser(rw http.ResponseWriter, r *request) bool {
	if r.PathValue("user_id") != r.tok.UserID {
		keystoneError(rw, http.StatusForbidden, "Forbidden", "You are not authorized to perform the requested action.")
		return false
	}
	if r.tok.AppCredID != "" && r.Method != http.MethodGet {
		keystoneError(rw, http.StatusForbidden, "Forbidden", "Using method 'application_credential' is not allowed for managing additional application credentials.")
		return false
	}
	return true
}

// ownAppCred returns the caller's application credential named by the
// path, answering 403 or 404 itself.
func ownAppCred(rw http.ResponseWriter, r *request) (*appCred, bool) {
	if !ownUser(rw, r) {
		return nil, false
	}
	ac, ok := r.w.AppCreds[r.PathValue("id")]
	if !ok || ac.UserID != r.tok.UserID {
		keystoneError(rw, http.StatusNotFound, "Not Found", "Could not find application credential: "+r.PathValue("id")+".")
		return nil, false
	}
	return ac, true
}

func appCredView(ac *appCred, withSecret bool) map[string]any {
	roles := make([]any, 0, len(ac.Roles))
	for _, role := range ac.Roles {
		roles = append(roles, map[string]any{"id": role, "name": role, "domain_id": nil})
	}
	v := map[string]any{"id": ac.ID, "name": ac.Name, "description": ac.Description, "user_id": ac.UserID,
		"project_id": ac.ProjectID, "roles": roles, "unrestricted": ac.Unrestricted, "expires_at": nil, "access_rules": []any{}}
	if ac.ExpiresAt != nil {
		v["expires_at"] = ac.ExpiresAt.Format("2006-01-02T15:04:05.000000")
	}
	if withSecret {
		v["secret"] = ac.Secret
	}
	return v
}

func (s *Sim) createAppCred(rw http.ResponseWriter, r *request) {
	if !ownUser(rw, r) {
		return
	}
	var body struct {
		AC struct {
			Name         string     `json:"name"`
			Description  string     `json:"description"`
			Secret       string     `json:"secret"`
			ExpiresAt    *time.Time `json:"expires_at"`
			Unrestricted bool       `json:"unrestricted"`
			Roles        []struct {
				Name string `json:"name"`
				ID   string `json:"id"`
			} `json:"roles"`
		} `json:"application_credential"`
	}
	if err := decodeBody(r, &body); err != nil || body.AC.Name == "" {
		keystoneError(rw, http.StatusBadRequest, "Bad Request", "Invalid input for field 'name': a name is required.")
		return
	}
	for _, ac := range r.w.AppCreds {
		if ac.UserID == r.tok.UserID && ac.Name == body.AC.Name {
			keystoneError(rw, http.StatusConflict, "Conflict", "Duplicate entry found with name "+body.AC.Name+".")
			return
		}
	}
	ac := &appCred{ID: newHex(), Name: body.AC.Name, Description: body.AC.Description, Secret: body.AC.Secret,
		UserID: r.tok.UserID, ProjectID: r.tok.ProjectID, Roles: r.tok.Roles, Unrestricted: body.AC.Unrestricted, ExpiresAt: body.AC.ExpiresAt}
	if ac.Secret == "" {
		ac.Secret = newSecret(32)
	}
	if len(body.AC.Roles) > 0 {
		ac.Roles = nil
		for _, role := range body.AC.Roles {
			name := role.Name
			if name == "" {
				name = role.ID
			}
			if !slices.Contains(r.tok.Roles, name) {
				keystoneError(rw, http.StatusNotFound, "Not Found", "Could not find role: "+name+".")
				return
			}
			ac.Roles = append(ac.Roles, name)
		}
	}
	r.w.AppCreds[ac.ID] = ac
	writeJSON(rw, http.StatusCreated, map[string]any{"application_credential": appCredView(ac, true)})
}

func (s *Sim) listAppCreds(rw http.ResponseWriter, r *request) {
	if !ownUser(rw, r) {
		return
	}
	name := r.URL.Query().Get("name")
	var out []any
	for _, ac := range sortedBy(r.w.AppCreds, func(a *appCred) string { return a.Name }) {
		if ac.UserID == r.tok.UserID && (name == "" || ac.Name == name) {
			out = append(out, appCredView(ac, false))
		}
	}
	writeJSON(rw, http.StatusOK, map[string]any{"application_credentials": orEmpty(out),
		"links": map[string]any{"self": requestBase(r.Request, r.s) + r.URL.Path, "next": nil, "previous": nil}})
}

func (s *Sim) getAppCred(rw http.ResponseWriter, r *request) {
	ac, ok := ownAppCred(rw, r)
	if !ok {
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"application_credential": appCredView(ac, false)})
}

func (s *Sim) deleteAppCred(rw http.ResponseWriter, r *request) {
	ac, ok := ownAppCred(rw, r)
	if !ok {
		return
	}
	delete(r.w.AppCreds, ac.ID)
	rw.WriteHeader(http.StatusNoContent)
}
