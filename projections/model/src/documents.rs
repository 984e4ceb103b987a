//! Typed leaf documents of the installation contract (spec/engine.md §12; spec/catalog.md §1.3):
//! material identities, catalog identities, material descriptors, installed lineage, authorized
//! material, install plan descriptors and execution bindings, plus the authorization digests and
//! the lineage promotion classifier.
//!
//! Every document is kept as a validated [`Json`] mapping rather than a Rust struct, because the
//! journal stores and hashes exactly these mappings: validating the mapping itself (exact key set,
//! schema string, field shapes, recomputed digest) is what makes a stored byte string trustworthy.
//! Builders compute the digest and then run the validator, so a built document is always valid.

use crate::digest::{cj_digest, cja_digest};
use crate::json::{Json, JsonMap};
use crate::protocol::{HostAction, ProtocolError, exact_keys, has_exact_keys, perr};
use crate::shape::{is_capability_identity, is_safe_token, is_sha};
use crate::vocab::CapabilityKind;

pub const MATERIAL_IDENTITY_SCHEMA: &str = "ctx.material-identity-v2";
pub const CATALOG_IDENTITY_SCHEMA: &str = "ctx.catalog-capability-identity-v1";
pub const MATERIAL_DESCRIPTOR_SCHEMA_V1: &str = "ctx.material-descriptor-v1";
pub const MATERIAL_DESCRIPTOR_SCHEMA_V2: &str = "ctx.material-descriptor-v2";
pub const INSTALLED_LINEAGE_SCHEMA: &str = "ctx.installed-material-lineage-v1";
pub const AUTHORIZED_MATERIAL_SCHEMA: &str = "ctx.authorized-material-v1";
pub const INSTALL_DESCRIPTOR_SCHEMA_V1: &str = "ctx.install-plan-descriptor-v1";
pub const INSTALL_DESCRIPTOR_SCHEMA_V2: &str = "ctx.install-plan-descriptor-v2";
pub const EXECUTION_BINDING_SCHEMA: &str = "ctx.install-execution-binding-v1";
pub const INSTALL_AUTHORIZATION_SCHEMA: &str = "ctx.install-action-authorization-v1";
pub const ACTIVATION_AUTHORIZATION_SCHEMA: &str = "ctx.activation-action-authorization-v1";
/// Largest material a consent can name, in bytes: the largest skill pack, a whole skill tree in one
/// text (spec/skill-tree.md §7). The reference bounds prepared prompt content at 6,000 bytes; ctx
/// places material in the host's directories instead of a prompt, so the bound is the store's.
pub const MAX_CONTENT_BYTES: i64 = 100 * 1024 * 1024;
/// Largest estimated token count of material: a `SKILL.md` of 256 KiB at four bytes a token.
pub const MAX_CONTENT_TOKENS: i64 = 65_536;
/// The only install target scope.
pub const TARGET_SCOPE_USER: &str = "user";
/// The only install rollback strategy.
pub const ROLLBACK_ATOMIC_RESTORE: &str = "atomic-restore";

const IDENTITY_MESSAGE: &str = "kind and capability_id must form one canonical identity";

const MATERIAL_IDENTITY_KEYS: [&str; 6] = [
    "capability_id",
    "content_bytes",
    "content_sha256",
    "identity_digest",
    "kind",
    "schema",
];
const CATALOG_IDENTITY_KEYS: [&str; 5] = [
    "capability_id",
    "catalog_namespace_digest",
    "identity_digest",
    "kind",
    "schema",
];
const MATERIAL_DESCRIPTOR_V1_KEYS: [&str; 9] = [
    "actionability",
    "capability_id",
    "content_bytes",
    "content_sha256",
    "descriptor_digest",
    "estimated_tokens",
    "kind",
    "material_snapshot_digest",
    "schema",
];
const MATERIAL_DESCRIPTOR_V2_KEYS: [&str; 10] = [
    "actionability",
    "capability_id",
    "content_bytes",
    "content_sha256",
    "descriptor_digest",
    "estimated_tokens",
    "kind",
    "material_identity_digest",
    "material_snapshot_digest",
    "schema",
];
const LINEAGE_KEYS: [&str; 9] = [
    "capability_id",
    "catalog_identity_digest",
    "install_action_content_digest",
    "install_receipt_content_digest",
    "kind",
    "lineage_digest",
    "material_identity_digest",
    "origin_install_descriptor_digest",
    "schema",
];
/// The digest fields of a lineage, in the order the reference validates them.
const LINEAGE_DIGEST_FIELDS: [&str; 5] = [
    "catalog_identity_digest",
    "material_identity_digest",
    "origin_install_descriptor_digest",
    "install_action_content_digest",
    "install_receipt_content_digest",
];
const AUTHORIZED_MATERIAL_KEYS: [&str; 8] = [
    "capability_id",
    "catalog_identity_digest",
    "catalog_material_descriptor",
    "installed_material_lineage",
    "kind",
    "material_identity_digest",
    "origin",
    "schema",
];
const INSTALL_DESCRIPTOR_V1_KEYS: [&str; 11] = [
    "capability_id",
    "credential_requirement",
    "descriptor_digest",
    "installer_id",
    "kind",
    "permission_expansion",
    "plan_digest",
    "provenance_digest",
    "rollback_strategy",
    "schema",
    "target_scope",
];
const INSTALL_DESCRIPTOR_V2_KEYS: [&str; 12] = [
    "capability_id",
    "credential_requirement",
    "descriptor_digest",
    "installer_id",
    "kind",
    "permission_expansion",
    "plan_digest",
    "provenance_digest",
    "result_material_identity_digest",
    "rollback_strategy",
    "schema",
    "target_scope",
];
const EXECUTION_BINDING_KEYS: [&str; 6] = [
    "binding_digest",
    "driver_digest",
    "driver_id",
    "host_identity_digest",
    "schema",
    "target_identity_digest",
];

// ---------------------------------------------------------------------------------------------
// Shared field helpers. The content and lineage documents report a wrong key set as one sentence
// ("has missing or unknown fields"); the installation documents name the offending keys.

/// Exact key set check with the content/lineage messages.
fn exact_doc<'a>(value: &'a Json, keys: &[&str], name: &str) -> Result<&'a JsonMap, ProtocolError> {
    let Some(m) = value.as_obj() else {
        return perr(format!("{name} must be an object with string fields"));
    };
    if !has_exact_keys(m, keys) {
        return perr(format!("{name} has missing or unknown fields"));
    }
    Ok(m)
}

/// Exact key set check with the installation messages (sorted, comma separated names).
fn install_doc<'a>(
    value: &'a Json,
    keys: &[&str],
    name: &str,
) -> Result<&'a JsonMap, ProtocolError> {
    exact_keys(value, keys).map_err(|f| ProtocolError::new(f.sentence(name, "an object", "fields")))
}

fn text<'a>(m: &'a JsonMap, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Json::as_str)
}

/// A required SHA-256 field; `name` is how the reference names it in the message.
fn digest<'a>(m: &'a JsonMap, key: &str, name: &str) -> Result<&'a str, ProtocolError> {
    match text(m, key) {
        Some(s) if is_sha(s) => Ok(s),
        _ => perr(format!("{name} must be a lowercase SHA-256 digest")),
    }
}

/// `(capability_id, kind)` forming one canonical identity.
fn capability_identity(m: &JsonMap) -> Result<(&str, &str), ProtocolError> {
    match (text(m, "capability_id"), text(m, "kind")) {
        (Some(id), Some(kind)) if is_capability_identity(kind, id) => Ok((id, kind)),
        _ => perr(IDENTITY_MESSAGE),
    }
}

/// An integer in `0..=max`; booleans and floats are not integers here.
fn bounded(m: &JsonMap, key: &str, max: i64) -> Result<i64, ProtocolError> {
    match m.get(key) {
        Some(Json::Int(i)) if (0..=max).contains(i) => Ok(*i),
        _ => perr(format!("{key} is outside its bounded range")),
    }
}

/// `H(CJA(document without its digest field))`: every digest of this module covers exactly the
/// other fields of its document, so after the exact key set check this is the recomputation.
fn digest_without(m: &JsonMap, digest_key: &str) -> String {
    let mut rest = m.clone();
    rest.remove(digest_key);
    cja_digest(&Json::Obj(rest))
}

/// Adds `digest_key = H(CJA(fields))` to `fields`.
fn seal(mut fields: JsonMap, digest_key: &str) -> Json {
    let d = cja_digest(&Json::Obj(fields.clone()));
    fields.insert(digest_key.to_owned(), Json::Str(d));
    Json::Obj(fields)
}

fn map<const N: usize>(pairs: [(&str, Json); N]) -> JsonMap {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

// ---------------------------------------------------------------------------------------------
// MaterialIdentity

/// Validates a `ctx.material-identity-v2` document.
pub fn validate_material_identity(value: &Json) -> Result<(), ProtocolError> {
    let m = exact_doc(value, &MATERIAL_IDENTITY_KEYS, "material identity")?;
    if text(m, "schema") != Some(MATERIAL_IDENTITY_SCHEMA) {
        return perr("material identity schema is unsupported");
    }
    capability_identity(m)?;
    digest(m, "content_sha256", "content_sha256")?;
    if bounded(m, "content_bytes", MAX_CONTENT_BYTES)? == 0 {
        return perr("content_bytes must describe non-empty material");
    }
    let supplied = digest(m, "identity_digest", "identity_digest")?;
    if supplied != digest_without(m, "identity_digest") {
        return perr("identity_digest does not match material identity fields");
    }
    Ok(())
}

/// Seals a material identity without checking its fields: `identity_digest = H(CJA({capability_id,
/// content_bytes, content_sha256, kind, schema}))`. For values taken from validated documents;
/// [`material_identity`] is the checked constructor.
pub fn build_material_identity(
    capability_id: &str,
    kind: &str,
    content_sha256: &str,
    content_bytes: i64,
) -> Json {
    seal(
        map([
            ("capability_id", Json::str(capability_id)),
            ("content_bytes", Json::Int(content_bytes)),
            ("content_sha256", Json::str(content_sha256)),
            ("kind", Json::str(kind)),
            ("schema", Json::str(MATERIAL_IDENTITY_SCHEMA)),
        ]),
        "identity_digest",
    )
}

/// Builds and validates a material identity.
pub fn material_identity(
    capability_id: &str,
    kind: &str,
    content_sha256: &str,
    content_bytes: i64,
) -> Result<Json, ProtocolError> {
    let doc = build_material_identity(capability_id, kind, content_sha256, content_bytes);
    validate_material_identity(&doc)?;
    Ok(doc)
}

// ---------------------------------------------------------------------------------------------
// CatalogCapabilityIdentity

/// Validates a `ctx.catalog-capability-identity-v1` document.
pub fn validate_catalog_identity(value: &Json) -> Result<(), ProtocolError> {
    let m = exact_doc(value, &CATALOG_IDENTITY_KEYS, "catalog capability identity")?;
    if text(m, "schema") != Some(CATALOG_IDENTITY_SCHEMA) {
        return perr("catalog capability identity schema is unsupported");
    }
    capability_identity(m)?;
    digest(m, "catalog_namespace_digest", "catalog_namespace_digest")?;
    let supplied = digest(m, "identity_digest", "identity_digest")?;
    if supplied != digest_without(m, "identity_digest") {
        return perr("identity_digest does not match catalog identity fields");
    }
    Ok(())
}

/// Builds a catalog identity; `identity_digest = H(CJA({capability_id, catalog_namespace_digest,
/// kind, schema}))`.
pub fn catalog_capability_identity(
    capability_id: &str,
    kind: &str,
    catalog_namespace_digest: &str,
) -> Result<Json, ProtocolError> {
    let doc = seal(
        map([
            ("capability_id", Json::str(capability_id)),
            (
                "catalog_namespace_digest",
                Json::str(catalog_namespace_digest),
            ),
            ("kind", Json::str(kind)),
            ("schema", Json::str(CATALOG_IDENTITY_SCHEMA)),
        ]),
        "identity_digest",
    );
    validate_catalog_identity(&doc)?;
    Ok(doc)
}

// ---------------------------------------------------------------------------------------------
// MaterialDescriptor v1 / v2

/// The fields of a material descriptor before its digest is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaterialDescriptorInput<'a> {
    pub capability_id: &'a str,
    pub kind: &'a str,
    /// `load` or `manual`.
    pub actionability: &'a str,
    pub content_sha256: Option<&'a str>,
    pub content_bytes: i64,
    pub estimated_tokens: i64,
    /// Serialized under the key `material_snapshot_digest`.
    pub provenance_digest: &'a str,
    /// Present exactly for schema v2.
    pub material_identity_digest: Option<&'a str>,
}

/// Validates a `ctx.material-descriptor-v1` or `-v2` document.
pub fn validate_material_descriptor(value: &Json) -> Result<(), ProtocolError> {
    let Some(m) = value.as_obj() else {
        return perr("material descriptor must be an object");
    };
    let v2 = match text(m, "schema") {
        Some(MATERIAL_DESCRIPTOR_SCHEMA_V1) => false,
        Some(MATERIAL_DESCRIPTOR_SCHEMA_V2) => true,
        _ => return perr("material descriptor schema is unsupported"),
    };
    let keys: &[&str] = if v2 {
        &MATERIAL_DESCRIPTOR_V2_KEYS
    } else {
        &MATERIAL_DESCRIPTOR_V1_KEYS
    };
    exact_doc(value, keys, "material descriptor")?;
    let (id, kind) = capability_identity(m)?;
    let actionability = text(m, "actionability");
    if !matches!(actionability, Some("load" | "manual")) {
        return perr("descriptor actionability is unsupported");
    }
    let content = match m.get("content_sha256") {
        None | Some(Json::Null) => None,
        Some(Json::Str(s)) if is_sha(s) => Some(s.as_str()),
        Some(_) => return perr("content_sha256 must be a lowercase SHA-256 digest"),
    };
    if actionability == Some("load") && content.is_none() {
        return perr("loadable material requires an exact content digest");
    }
    if actionability == Some("manual") && content.is_some() {
        return perr("manual material cannot claim exposed content");
    }
    let bytes = bounded(m, "content_bytes", MAX_CONTENT_BYTES)?;
    bounded(m, "estimated_tokens", MAX_CONTENT_TOKENS)?;
    digest(m, "material_snapshot_digest", "provenance_digest")?;
    let supplied = digest(m, "descriptor_digest", "descriptor_digest")?;
    if v2 {
        if actionability != Some("load") {
            return perr("v2 material descriptor must be loadable");
        }
        let claimed = digest(m, "material_identity_digest", "material_identity_digest")?;
        let expected = material_identity(id, kind, content.unwrap_or_default(), bytes)?;
        if expected.get_str("identity_digest") != Some(claimed) {
            return perr("material_identity_digest does not match descriptor content");
        }
    }
    if supplied != digest_without(m, "descriptor_digest") {
        return perr("descriptor_digest does not match descriptor fields");
    }
    Ok(())
}

/// Builds a material descriptor; schema v2 exactly when a material identity digest is given.
pub fn material_descriptor(input: &MaterialDescriptorInput<'_>) -> Result<Json, ProtocolError> {
    let mut fields = map([
        ("actionability", Json::str(input.actionability)),
        ("capability_id", Json::str(input.capability_id)),
        ("content_bytes", Json::Int(input.content_bytes)),
        ("content_sha256", Json::opt_str(input.content_sha256)),
        ("estimated_tokens", Json::Int(input.estimated_tokens)),
        ("kind", Json::str(input.kind)),
        (
            "material_snapshot_digest",
            Json::str(input.provenance_digest),
        ),
        ("schema", Json::str(MATERIAL_DESCRIPTOR_SCHEMA_V1)),
    ]);
    if let Some(mid) = input.material_identity_digest {
        fields.insert("schema".into(), Json::str(MATERIAL_DESCRIPTOR_SCHEMA_V2));
        fields.insert("material_identity_digest".into(), Json::str(mid));
    }
    let doc = seal(fields, "descriptor_digest");
    validate_material_descriptor(&doc)?;
    Ok(doc)
}

// ---------------------------------------------------------------------------------------------
// InstalledMaterialLineage

/// Validates a `ctx.installed-material-lineage-v1` document.
pub fn validate_installed_lineage(value: &Json) -> Result<(), ProtocolError> {
    let m = exact_doc(value, &LINEAGE_KEYS, "installed material lineage")?;
    if text(m, "schema") != Some(INSTALLED_LINEAGE_SCHEMA) {
        return perr("installed material lineage schema is unsupported");
    }
    capability_identity(m)?;
    for key in LINEAGE_DIGEST_FIELDS {
        digest(m, key, key)?;
    }
    let supplied = digest(m, "lineage_digest", "lineage_digest")?;
    if supplied != digest_without(m, "lineage_digest") {
        return perr("lineage_digest does not match installed material lineage fields");
    }
    Ok(())
}

/// Builds the lineage a successful install receipt proves. The reducer passes values taken from
/// validated documents; [`validate_installed_lineage`] checks a built value when in doubt.
pub fn build_installed_lineage(
    capability_id: &str,
    kind: &str,
    catalog_identity_digest: &str,
    material_identity_digest: &str,
    origin_install_descriptor_digest: &str,
    install_action_content_digest: &str,
    install_receipt_content_digest: &str,
) -> Json {
    seal(
        map([
            ("capability_id", Json::str(capability_id)),
            (
                "catalog_identity_digest",
                Json::str(catalog_identity_digest),
            ),
            (
                "install_action_content_digest",
                Json::str(install_action_content_digest),
            ),
            (
                "install_receipt_content_digest",
                Json::str(install_receipt_content_digest),
            ),
            ("kind", Json::str(kind)),
            (
                "material_identity_digest",
                Json::str(material_identity_digest),
            ),
            (
                "origin_install_descriptor_digest",
                Json::str(origin_install_descriptor_digest),
            ),
            ("schema", Json::str(INSTALLED_LINEAGE_SCHEMA)),
        ]),
        "lineage_digest",
    )
}

// ---------------------------------------------------------------------------------------------
// AuthorizedMaterial

/// Validates a `ctx.authorized-material-v1` document (origin `catalog` or `installed`).
pub fn validate_authorized_material(value: &Json) -> Result<(), ProtocolError> {
    let m = exact_doc(value, &AUTHORIZED_MATERIAL_KEYS, "authorized material")?;
    if text(m, "schema") != Some(AUTHORIZED_MATERIAL_SCHEMA) {
        return perr("authorized material schema is unsupported");
    }
    // The nested documents are decoded before the material's own fields, as the reference does.
    let descriptor = match m.get("catalog_material_descriptor") {
        None | Some(Json::Null) => None,
        Some(d) => {
            validate_material_descriptor(d)?;
            Some(d)
        }
    };
    let lineage = match m.get("installed_material_lineage") {
        None | Some(Json::Null) => None,
        Some(l) => {
            validate_installed_lineage(l)?;
            Some(l)
        }
    };
    let (id, kind) = capability_identity(m)?;
    let catalog_digest = digest(m, "catalog_identity_digest", "catalog_identity_digest")?;
    let material_digest = digest(m, "material_identity_digest", "material_identity_digest")?;
    match text(m, "origin") {
        Some("catalog") => {
            let Some(descriptor) = descriptor else {
                return perr("catalog material requires an exact catalog descriptor");
            };
            if lineage.is_some() {
                return perr(
                    "catalog material requires a descriptor and forbids installed lineage",
                );
            }
            let Some(described) = descriptor.get_str("material_identity_digest") else {
                return perr("catalog material requires a material-identity descriptor");
            };
            if (id, kind, material_digest)
                != (
                    descriptor.get_str("capability_id").unwrap_or_default(),
                    descriptor.get_str("kind").unwrap_or_default(),
                    described,
                )
            {
                return perr("catalog descriptor identity does not match authorized material");
            }
        }
        Some("installed") => {
            if descriptor.is_some() {
                return perr("installed material forbids a catalog descriptor");
            }
            let Some(lineage) = lineage else {
                return perr("installed material requires exact installed lineage");
            };
            let field = |k: &str| lineage.get_str(k).unwrap_or_default();
            if (id, kind, catalog_digest, material_digest)
                != (
                    field("capability_id"),
                    field("kind"),
                    field("catalog_identity_digest"),
                    field("material_identity_digest"),
                )
            {
                return perr("installed material identity does not match installed lineage");
            }
        }
        _ => return perr("material origin must be catalog or installed"),
    }
    Ok(())
}

/// The `installed` material a validated lineage authorizes (the install receipt's result).
pub fn authorized_material_from_lineage(lineage: &Json) -> Result<Json, ProtocolError> {
    validate_installed_lineage(lineage)?;
    let field = |k: &str| Json::str(lineage.get_str(k).unwrap_or_default());
    let doc = Json::Obj(map([
        ("capability_id", field("capability_id")),
        ("catalog_identity_digest", field("catalog_identity_digest")),
        ("catalog_material_descriptor", Json::Null),
        ("installed_material_lineage", lineage.clone()),
        ("kind", field("kind")),
        (
            "material_identity_digest",
            field("material_identity_digest"),
        ),
        ("origin", Json::str("installed")),
        ("schema", Json::str(AUTHORIZED_MATERIAL_SCHEMA)),
    ]));
    validate_authorized_material(&doc)?;
    Ok(doc)
}

/// The `catalog` material a v2 material descriptor authorizes under a catalog identity digest.
/// (The catalog identity digest is part of the document, so it is a parameter here.)
pub fn authorized_material_from_catalog(
    catalog_identity_digest: &str,
    descriptor: &Json,
) -> Result<Json, ProtocolError> {
    validate_material_descriptor(descriptor)?;
    let Some(material_digest) = descriptor.get_str("material_identity_digest") else {
        return perr("catalog material requires a material-identity descriptor");
    };
    let field = |k: &str| Json::str(descriptor.get_str(k).unwrap_or_default());
    let doc = Json::Obj(map([
        ("capability_id", field("capability_id")),
        (
            "catalog_identity_digest",
            Json::str(catalog_identity_digest),
        ),
        ("catalog_material_descriptor", descriptor.clone()),
        ("installed_material_lineage", Json::Null),
        ("kind", field("kind")),
        ("material_identity_digest", Json::str(material_digest)),
        ("origin", Json::str("catalog")),
        ("schema", Json::str(AUTHORIZED_MATERIAL_SCHEMA)),
    ]));
    validate_authorized_material(&doc)?;
    Ok(doc)
}

/// The digest proving where an authorized material came from: the catalog descriptor digest
/// (origin `catalog`) or the lineage digest (origin `installed`). `None` for a malformed value.
pub fn origin_proof_digest(material: &Json) -> Option<&str> {
    match material.get_str("origin")? {
        "catalog" => material
            .get("catalog_material_descriptor")?
            .get_str("descriptor_digest"),
        "installed" => material
            .get("installed_material_lineage")?
            .get_str("lineage_digest"),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// InstallPlanDescriptor v1 / v2

/// The fields of an install plan descriptor before its digest is computed. Target scope and
/// rollback strategy have a single legal value each and are filled in by the builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstallDescriptorInput<'a> {
    pub capability_id: &'a str,
    pub kind: &'a str,
    pub installer_id: &'a str,
    pub plan_digest: &'a str,
    pub provenance_digest: &'a str,
    pub permission_expansion: bool,
    pub credential_requirement: bool,
    /// Present exactly for schema v2.
    pub result_material_identity_digest: Option<&'a str>,
}

/// Validates a `ctx.install-plan-descriptor-v1` or `-v2` document.
pub fn validate_install_plan_descriptor(value: &Json) -> Result<(), ProtocolError> {
    let Some(m) = value.as_obj() else {
        return perr("install plan descriptor must be an object");
    };
    let v2 = match text(m, "schema") {
        Some(INSTALL_DESCRIPTOR_SCHEMA_V1) => false,
        Some(INSTALL_DESCRIPTOR_SCHEMA_V2) => true,
        _ => return perr("install plan descriptor schema is unsupported"),
    };
    let keys: &[&str] = if v2 {
        &INSTALL_DESCRIPTOR_V2_KEYS
    } else {
        &INSTALL_DESCRIPTOR_V1_KEYS
    };
    install_doc(value, keys, "install plan descriptor")?;
    let (_, kind) = capability_identity(m)?;
    if !CapabilityKind::parse(kind).is_some_and(CapabilityKind::is_installable) {
        return perr("kind is not an installable capability kind");
    }
    if !text(m, "installer_id").is_some_and(is_safe_token) {
        return perr("installer_id must be a canonical token");
    }
    digest(m, "plan_digest", "plan_digest")?;
    digest(m, "provenance_digest", "provenance_digest")?;
    let supplied = digest(m, "descriptor_digest", "descriptor_digest")?;
    if text(m, "target_scope") != Some(TARGET_SCOPE_USER) {
        return perr("target_scope must be user");
    }
    if text(m, "rollback_strategy") != Some(ROLLBACK_ATOMIC_RESTORE) {
        return perr("rollback_strategy must be atomic-restore");
    }
    for key in ["permission_expansion", "credential_requirement"] {
        if !matches!(m.get(key), Some(Json::Bool(_))) {
            return perr(format!("{key} must be a boolean"));
        }
    }
    if v2 {
        digest(
            m,
            "result_material_identity_digest",
            "result_material_identity_digest",
        )?;
    }
    if supplied != digest_without(m, "descriptor_digest") {
        return perr("descriptor_digest does not match descriptor fields");
    }
    Ok(())
}

/// Builds an install plan descriptor; schema v2 exactly when a result material identity digest
/// is given. `descriptor_digest` covers every other field (spec/engine.md §12).
pub fn install_plan_descriptor(input: &InstallDescriptorInput<'_>) -> Result<Json, ProtocolError> {
    let mut fields = map([
        ("capability_id", Json::str(input.capability_id)),
        (
            "credential_requirement",
            Json::Bool(input.credential_requirement),
        ),
        ("installer_id", Json::str(input.installer_id)),
        ("kind", Json::str(input.kind)),
        (
            "permission_expansion",
            Json::Bool(input.permission_expansion),
        ),
        ("plan_digest", Json::str(input.plan_digest)),
        ("provenance_digest", Json::str(input.provenance_digest)),
        ("rollback_strategy", Json::str(ROLLBACK_ATOMIC_RESTORE)),
        ("schema", Json::str(INSTALL_DESCRIPTOR_SCHEMA_V1)),
        ("target_scope", Json::str(TARGET_SCOPE_USER)),
    ]);
    if let Some(result) = input.result_material_identity_digest {
        fields.insert("schema".into(), Json::str(INSTALL_DESCRIPTOR_SCHEMA_V2));
        fields.insert("result_material_identity_digest".into(), Json::str(result));
    }
    let doc = seal(fields, "descriptor_digest");
    validate_install_plan_descriptor(&doc)?;
    Ok(doc)
}

/// True iff the descriptor is schema v2 and names exactly this material: same capability id,
/// kind and material identity digest.
pub fn descriptor_matches_result_material(descriptor: &Json, material: &Json) -> bool {
    descriptor.get_str("schema") == Some(INSTALL_DESCRIPTOR_SCHEMA_V2)
        && descriptor.get_str("capability_id").is_some()
        && descriptor.get_str("capability_id") == material.get_str("capability_id")
        && descriptor.get_str("kind") == material.get_str("kind")
        && descriptor
            .get_str("result_material_identity_digest")
            .is_some()
        && descriptor.get_str("result_material_identity_digest")
            == material.get_str("identity_digest")
}

// ---------------------------------------------------------------------------------------------
// InstallExecutionBinding

/// Validates a `ctx.install-execution-binding-v1` document.
pub fn validate_execution_binding(value: &Json) -> Result<(), ProtocolError> {
    let m = install_doc(value, &EXECUTION_BINDING_KEYS, "install execution binding")?;
    if text(m, "schema") != Some(EXECUTION_BINDING_SCHEMA) {
        return perr("install execution binding schema is unsupported");
    }
    if !text(m, "driver_id").is_some_and(is_safe_token) {
        return perr("driver_id must be a canonical token");
    }
    for key in [
        "driver_digest",
        "host_identity_digest",
        "target_identity_digest",
    ] {
        digest(m, key, key)?;
    }
    let supplied = digest(m, "binding_digest", "binding_digest")?;
    if supplied != digest_without(m, "binding_digest") {
        return perr("binding_digest does not match execution binding fields");
    }
    Ok(())
}

/// An install execution binding: the non-executable identity of the concrete driver, host and
/// target an install claim is burnt to. Construct through [`InstallExecutionBinding::new`] or the
/// decoders, which validate the fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallExecutionBinding {
    pub driver_id: String,
    pub driver_digest: String,
    pub host_identity_digest: String,
    pub target_identity_digest: String,
}

impl InstallExecutionBinding {
    /// A validated binding.
    pub fn new(
        driver_id: &str,
        driver_digest: &str,
        host_identity_digest: &str,
        target_identity_digest: &str,
    ) -> Result<InstallExecutionBinding, ProtocolError> {
        let binding = InstallExecutionBinding {
            driver_id: driver_id.to_owned(),
            driver_digest: driver_digest.to_owned(),
            host_identity_digest: host_identity_digest.to_owned(),
            target_identity_digest: target_identity_digest.to_owned(),
        };
        binding.validate()?;
        Ok(binding)
    }

    /// Checks the field shapes (safe-token driver id, three digests).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        validate_execution_binding(&self.to_json())
    }

    fn digest_fields(&self) -> JsonMap {
        map([
            ("driver_digest", Json::str(&self.driver_digest)),
            ("driver_id", Json::str(&self.driver_id)),
            (
                "host_identity_digest",
                Json::str(&self.host_identity_digest),
            ),
            ("schema", Json::str(EXECUTION_BINDING_SCHEMA)),
            (
                "target_identity_digest",
                Json::str(&self.target_identity_digest),
            ),
        ])
    }

    /// `H(CJA({driver_digest, driver_id, host_identity_digest, schema, target_identity_digest}))`.
    pub fn binding_digest(&self) -> String {
        cja_digest(&Json::Obj(self.digest_fields()))
    }

    /// The six-field document, `binding_digest` included.
    pub fn to_json(&self) -> Json {
        seal(self.digest_fields(), "binding_digest")
    }

    /// The JSON form of the binding: its ASCII canonical text.
    pub fn to_json_text(&self) -> String {
        self.to_json().to_cja()
    }

    /// Decodes a binding document (exact fields, schema, matching digest).
    pub fn from_json(value: &Json) -> Result<InstallExecutionBinding, ProtocolError> {
        validate_execution_binding(value)?;
        let field = |k: &str| value.get_str(k).unwrap_or_default().to_owned();
        Ok(InstallExecutionBinding {
            driver_id: field("driver_id"),
            driver_digest: field("driver_digest"),
            host_identity_digest: field("host_identity_digest"),
            target_identity_digest: field("target_identity_digest"),
        })
    }

    /// Decodes the JSON form, which must be exactly the canonical ASCII text of a valid binding.
    pub fn from_canonical_text(text: &str) -> Result<InstallExecutionBinding, ProtocolError> {
        let value = match Json::parse(text) {
            Ok(v) => v,
            // A duplicate key decodes (last wins) in the reference and then fails re-encoding.
            Err(crate::json::JsonError::DuplicateKey { .. }) => {
                return perr("install execution binding JSON must use canonical encoding");
            }
            Err(_) => return perr("install execution binding must be valid JSON"),
        };
        if value.as_obj().is_none() {
            return perr("install execution binding JSON must encode an object");
        }
        let binding = InstallExecutionBinding::from_json(&value)?;
        if binding.to_json_text() != text {
            return perr("install execution binding JSON must use canonical encoding");
        }
        Ok(binding)
    }
}

// ---------------------------------------------------------------------------------------------
// Authorization digests (spec/engine.md §12)

/// The install authorization digest binding one install claim to its journaled authority:
/// `H(CJ({action: {content_digest, json: <action CJ text>}, catalog_snapshot_digest, descriptor,
/// policy_snapshot_digest, schema, selection}))`, in UTF-8 mode.
pub fn install_authorization_digest(
    action: &HostAction,
    selection_row: &Json,
    descriptor: &Json,
    catalog_snapshot_digest: &str,
    policy_snapshot_digest: &str,
) -> String {
    cj_digest(&Json::Obj(map([
        (
            "action",
            Json::Obj(map([
                ("content_digest", Json::str(action.content_digest())),
                ("json", Json::str(action.to_cj())),
            ])),
        ),
        (
            "catalog_snapshot_digest",
            Json::str(catalog_snapshot_digest),
        ),
        ("descriptor", descriptor.clone()),
        ("policy_snapshot_digest", Json::str(policy_snapshot_digest)),
        ("schema", Json::str(INSTALL_AUTHORIZATION_SCHEMA)),
        ("selection", selection_row.clone()),
    ])))
}

/// The activation authorization digest: `H(CJA({action_content_digest, action_json,
/// execution_binding_digest, host_descriptor_digest, schema}))`.
pub fn activation_authorization_digest(
    action_content_digest: &str,
    action_json_text: &str,
    execution_binding_digest: &str,
    host_descriptor_digest: &str,
) -> String {
    cja_digest(&Json::Obj(map([
        ("action_content_digest", Json::str(action_content_digest)),
        ("action_json", Json::str(action_json_text)),
        (
            "execution_binding_digest",
            Json::str(execution_binding_digest),
        ),
        ("host_descriptor_digest", Json::str(host_descriptor_digest)),
        ("schema", Json::str(ACTIVATION_AUTHORIZATION_SCHEMA)),
    ])))
}

// ---------------------------------------------------------------------------------------------
// Lineage promotion classifier (spec/engine.md §12, last bullet)

/// The material binding of a runtime capability or a proposed plan row.
#[derive(Debug, PartialEq, Eq)]
struct LineageBinding<'a> {
    capability_id: &'a str,
    kind: &'a str,
    catalog_identity_digest: &'a str,
    actionability: &'a str,
    material_identity_digest: &'a str,
    install_descriptor_digest: Option<&'a str>,
    installed_material_lineage_digest: Option<&'a str>,
}

fn row_str<'a>(row: &'a Json, key: &str) -> &'a str {
    row.get_str(key).unwrap_or_default()
}

/// The binding of a schema-v3 plan row; `None` for a manual row, which has no material.
fn row_binding<'a>(row: &'a Json, lineage_digest: Option<&'a str>) -> Option<LineageBinding<'a>> {
    let authority = row.get("authority")?;
    let (material_identity_digest, install_descriptor_digest) = match authority.get_str("type")? {
        "load" => (
            authority
                .get("material")?
                .get_str("material_identity_digest")?,
            None,
        ),
        "install" => (
            authority
                .get("result_material")?
                .get_str("identity_digest")?,
            Some(authority.get("descriptor")?.get_str("descriptor_digest")?),
        ),
        _ => return None,
    };
    Some(LineageBinding {
        capability_id: row_str(row, "capability_id"),
        kind: row_str(row, "kind"),
        catalog_identity_digest: row
            .get("catalog_identity")
            .and_then(|c| c.get_str("identity_digest"))
            .unwrap_or_default(),
        actionability: row_str(row, "actionability"),
        material_identity_digest,
        install_descriptor_digest,
        // Only install bindings carry the receipt-proven lineage of their current material.
        installed_material_lineage_digest: install_descriptor_digest.and(lineage_digest),
    })
}

/// Classifies replacing a live capability's plan row `current_row` (with its current
/// AuthorizedMaterial, or `Json::Null`) by `proposed_row`: `Ok("unchanged")` for an identical
/// binding, `Ok("install-to-load")` for an exact receipt-proven promotion, otherwise
/// `Err(rejection code)`, checked in the reference's order.
pub fn classify_lineage_promotion(
    current_row: &Json,
    current_material: &Json,
    proposed_row: &Json,
    has_pending_effect: bool,
) -> Result<&'static str, &'static str> {
    let lineage = current_material
        .get("installed_material_lineage")
        .filter(|l| !l.is_null());
    let lineage_digest = lineage.and_then(|l| l.get_str("lineage_digest"));
    if (
        row_str(current_row, "capability_id"),
        row_str(current_row, "kind"),
    ) != (
        row_str(proposed_row, "capability_id"),
        row_str(proposed_row, "kind"),
    ) {
        return Err("capability-identity-mismatch");
    }
    let catalog = |row: &Json| {
        row.get("catalog_identity")
            .and_then(|c| c.get_str("identity_digest"))
            .map(str::to_owned)
    };
    if catalog(current_row) != catalog(proposed_row) {
        return Err("catalog-identity-mismatch");
    }
    // Manual rows carry no material binding; nothing can be promoted to or from them.
    let (Some(current), Some(proposed)) = (
        row_binding(current_row, lineage_digest),
        row_binding(proposed_row, None),
    ) else {
        return Err("unsupported-lineage-transition");
    };
    if current == proposed {
        return Ok("unchanged");
    }
    if current.actionability != "install" || proposed.actionability != "load" {
        return Err("unsupported-lineage-transition");
    }
    if current.material_identity_digest != proposed.material_identity_digest {
        return Err("material-identity-mismatch");
    }
    let Some(lineage) = lineage else {
        return Err("installed-lineage-missing");
    };
    if has_pending_effect {
        return Err("pending-effect");
    }
    let field = |k: &str| lineage.get_str(k).unwrap_or_default();
    if (field("capability_id"), field("kind")) != (current.capability_id, current.kind) {
        return Err("lineage-capability-identity-mismatch");
    }
    if field("catalog_identity_digest") != current.catalog_identity_digest {
        return Err("lineage-catalog-identity-mismatch");
    }
    if field("material_identity_digest") != current.material_identity_digest {
        return Err("lineage-material-identity-mismatch");
    }
    if Some(field("origin_install_descriptor_digest")) != current.install_descriptor_digest {
        return Err("lineage-install-descriptor-mismatch");
    }
    let Some(bound) = current.installed_material_lineage_digest else {
        return Err("lineage-binding-missing");
    };
    if field("lineage_digest") != bound {
        return Err("lineage-proof-digest-mismatch");
    }
    Ok("install-to-load")
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::digest::sha256_hex;

    pub(crate) fn d(c: char) -> String {
        c.to_string().repeat(64)
    }

    pub(crate) fn demo_material() -> Json {
        material_identity("skill:demo", "skill", &sha256_hex("hello"), 5).unwrap()
    }

    pub(crate) fn demo_catalog() -> Json {
        catalog_capability_identity("skill:demo", "skill", &"0".repeat(64)).unwrap()
    }

    pub(crate) fn demo_descriptor_v2() -> Json {
        let material = demo_material();
        material_descriptor(&MaterialDescriptorInput {
            capability_id: "skill:demo",
            kind: "skill",
            actionability: "load",
            content_sha256: Some(&sha256_hex("hello")),
            content_bytes: 5,
            estimated_tokens: 2,
            provenance_digest: &d('a'),
            material_identity_digest: material.get_str("identity_digest"),
        })
        .unwrap()
    }

    pub(crate) fn demo_install_descriptor() -> Json {
        let material = demo_material();
        install_plan_descriptor(&InstallDescriptorInput {
            capability_id: "skill:demo",
            kind: "skill",
            installer_id: "ctx-install-plan-executor-v1",
            plan_digest: &d('b'),
            provenance_digest: &d('c'),
            permission_expansion: false,
            credential_requirement: false,
            result_material_identity_digest: material.get_str("identity_digest"),
        })
        .unwrap()
    }

    pub(crate) fn demo_lineage() -> Json {
        build_installed_lineage(
            "skill:demo",
            "skill",
            demo_catalog().get_str("identity_digest").unwrap(),
            demo_material().get_str("identity_digest").unwrap(),
            demo_install_descriptor()
                .get_str("descriptor_digest")
                .unwrap(),
            &d('d'),
            &d('e'),
        )
    }

    fn with(doc: &Json, key: &str, value: Json) -> Json {
        let mut m = doc.as_obj().unwrap().clone();
        m.insert(key.into(), value);
        Json::Obj(m)
    }

    fn without(doc: &Json, key: &str) -> Json {
        let mut m = doc.as_obj().unwrap().clone();
        m.remove(key);
        Json::Obj(m)
    }

    fn msg(r: Result<(), ProtocolError>) -> String {
        r.unwrap_err().message().to_owned()
    }

    #[test]
    fn test_vectors_match_the_reference() {
        assert_eq!(
            demo_material().get_str("identity_digest").unwrap(),
            "e2a8f0377c8c38ab400b297023faa2e15cef4914eba257a761299b32520c0678"
        );
        assert_eq!(
            demo_catalog().get_str("identity_digest").unwrap(),
            "54eb6632db06932ce8cdbd2803cdbecafddff0ce9e9e2f56db2440579fb0e7d2"
        );
    }

    #[test]
    fn material_identity_rejections() {
        let m = demo_material();
        validate_material_identity(&m).unwrap();
        assert_eq!(
            msg(validate_material_identity(&with(&m, "extra", Json::Null))),
            "material identity has missing or unknown fields"
        );
        assert_eq!(
            msg(validate_material_identity(&with(
                &m,
                "schema",
                Json::str("x")
            ))),
            "material identity schema is unsupported"
        );
        assert_eq!(
            msg(validate_material_identity(&with(
                &m,
                "identity_digest",
                Json::str(d('f'))
            ))),
            "identity_digest does not match material identity fields"
        );
        assert_eq!(
            msg(validate_material_identity(&with(
                &m,
                "content_bytes",
                Json::Int(0)
            ))),
            "content_bytes must describe non-empty material"
        );
        assert_eq!(
            msg(validate_material_identity(&with(
                &m,
                "content_bytes",
                Json::Int(MAX_CONTENT_BYTES + 1)
            ))),
            "content_bytes is outside its bounded range"
        );
        assert_eq!(
            msg(validate_material_identity(&with(
                &m,
                "kind",
                Json::str("agent")
            ))),
            IDENTITY_MESSAGE
        );
    }

    #[test]
    fn catalog_identity_rejections() {
        let c = demo_catalog();
        validate_catalog_identity(&c).unwrap();
        assert_eq!(
            msg(validate_catalog_identity(&without(&c, "kind"))),
            "catalog capability identity has missing or unknown fields"
        );
        assert_eq!(
            msg(validate_catalog_identity(&with(
                &c,
                "schema",
                Json::str("x")
            ))),
            "catalog capability identity schema is unsupported"
        );
        assert_eq!(
            msg(validate_catalog_identity(&with(
                &c,
                "identity_digest",
                Json::str(d('f'))
            ))),
            "identity_digest does not match catalog identity fields"
        );
    }

    #[test]
    fn material_descriptors_v1_and_v2() {
        let v2 = demo_descriptor_v2();
        validate_material_descriptor(&v2).unwrap();
        // The provenance digest is hashed under the key `material_snapshot_digest`.
        assert_eq!(
            v2.get_str("material_snapshot_digest"),
            Some(d('a').as_str())
        );
        let v1 = material_descriptor(&MaterialDescriptorInput {
            capability_id: "skill:demo",
            kind: "skill",
            actionability: "manual",
            content_sha256: None,
            content_bytes: 0,
            estimated_tokens: 0,
            provenance_digest: &d('a'),
            material_identity_digest: None,
        })
        .unwrap();
        assert_eq!(v1.get_str("schema"), Some(MATERIAL_DESCRIPTOR_SCHEMA_V1));
        assert_eq!(
            msg(validate_material_descriptor(&with(
                &v2,
                "extra",
                Json::Null
            ))),
            "material descriptor has missing or unknown fields"
        );
        assert_eq!(
            msg(validate_material_descriptor(&with(
                &v2,
                "schema",
                Json::str("x")
            ))),
            "material descriptor schema is unsupported"
        );
        assert_eq!(
            msg(validate_material_descriptor(&with(
                &v2,
                "descriptor_digest",
                Json::str(d('f'))
            ))),
            "descriptor_digest does not match descriptor fields"
        );
        assert_eq!(
            msg(validate_material_descriptor(&with(
                &v2,
                "material_identity_digest",
                Json::str(d('f'))
            ))),
            "material_identity_digest does not match descriptor content"
        );
        assert_eq!(
            msg(validate_material_descriptor(&with(
                &v1,
                "content_sha256",
                Json::str(d('1'))
            ))),
            "manual material cannot claim exposed content"
        );
    }

    #[test]
    fn lineage_and_authorized_material() {
        let lineage = demo_lineage();
        validate_installed_lineage(&lineage).unwrap();
        assert_eq!(
            msg(validate_installed_lineage(&without(&lineage, "schema"))),
            "installed material lineage has missing or unknown fields"
        );
        assert_eq!(
            msg(validate_installed_lineage(&with(
                &lineage,
                "schema",
                Json::str("x")
            ))),
            "installed material lineage schema is unsupported"
        );
        assert_eq!(
            msg(validate_installed_lineage(&with(
                &lineage,
                "lineage_digest",
                Json::str(d('f'))
            ))),
            "lineage_digest does not match installed material lineage fields"
        );

        let installed = authorized_material_from_lineage(&lineage).unwrap();
        validate_authorized_material(&installed).unwrap();
        assert_eq!(
            origin_proof_digest(&installed),
            lineage.get_str("lineage_digest")
        );

        let catalog_digest = demo_catalog()
            .get_str("identity_digest")
            .unwrap()
            .to_owned();
        let descriptor = demo_descriptor_v2();
        let from_catalog = authorized_material_from_catalog(&catalog_digest, &descriptor).unwrap();
        validate_authorized_material(&from_catalog).unwrap();
        assert_eq!(
            origin_proof_digest(&from_catalog),
            descriptor.get_str("descriptor_digest")
        );

        assert_eq!(
            msg(validate_authorized_material(&without(&installed, "origin"))),
            "authorized material has missing or unknown fields"
        );
        assert_eq!(
            msg(validate_authorized_material(&with(
                &installed,
                "schema",
                Json::str("x")
            ))),
            "authorized material schema is unsupported"
        );
        assert_eq!(
            msg(validate_authorized_material(&with(
                &installed,
                "origin",
                Json::str("catalog")
            ))),
            "catalog material requires an exact catalog descriptor"
        );
        assert_eq!(
            msg(validate_authorized_material(&with(
                &installed,
                "material_identity_digest",
                Json::str(d('f'))
            ))),
            "installed material identity does not match installed lineage"
        );
        assert_eq!(
            msg(validate_authorized_material(&with(
                &from_catalog,
                "origin",
                Json::str("x")
            ))),
            "material origin must be catalog or installed"
        );
        let bad_lineage = with(&lineage, "lineage_digest", Json::str(d('f')));
        assert_eq!(
            msg(validate_authorized_material(&with(
                &installed,
                "installed_material_lineage",
                bad_lineage
            ))),
            "lineage_digest does not match installed material lineage fields"
        );
    }

    #[test]
    fn install_plan_descriptors() {
        let descriptor = demo_install_descriptor();
        validate_install_plan_descriptor(&descriptor).unwrap();
        assert!(descriptor_matches_result_material(
            &descriptor,
            &demo_material()
        ));
        let other = material_identity("skill:demo", "skill", &d('9'), 7).unwrap();
        assert!(!descriptor_matches_result_material(&descriptor, &other));
        assert_eq!(
            msg(validate_install_plan_descriptor(&with(
                &descriptor,
                "zzz",
                Json::Null
            ))),
            "install plan descriptor has unknown fields: zzz"
        );
        assert_eq!(
            msg(validate_install_plan_descriptor(&without(
                &descriptor,
                "plan_digest"
            ))),
            "install plan descriptor is missing fields: plan_digest"
        );
        assert_eq!(
            msg(validate_install_plan_descriptor(&with(
                &descriptor,
                "schema",
                Json::str("x")
            ))),
            "install plan descriptor schema is unsupported"
        );
        assert_eq!(
            msg(validate_install_plan_descriptor(&with(
                &descriptor,
                "descriptor_digest",
                Json::str(d('f'))
            ))),
            "descriptor_digest does not match descriptor fields"
        );
        assert_eq!(
            msg(validate_install_plan_descriptor(&with(
                &descriptor,
                "target_scope",
                Json::str("system")
            ))),
            "target_scope must be user"
        );
        let v1 = install_plan_descriptor(&InstallDescriptorInput {
            capability_id: "agent:demo",
            kind: "agent",
            installer_id: "x",
            plan_digest: &d('1'),
            provenance_digest: &d('2'),
            permission_expansion: true,
            credential_requirement: false,
            result_material_identity_digest: None,
        })
        .unwrap();
        assert_eq!(v1.get_str("schema"), Some(INSTALL_DESCRIPTOR_SCHEMA_V1));
        assert!(!descriptor_matches_result_material(&v1, &demo_material()));
        let harness = InstallDescriptorInput {
            capability_id: "harness:demo",
            kind: "harness",
            installer_id: "x",
            plan_digest: &d('1'),
            provenance_digest: &d('2'),
            permission_expansion: false,
            credential_requirement: false,
            result_material_identity_digest: None,
        };
        assert_eq!(
            install_plan_descriptor(&harness).unwrap_err().message(),
            "kind is not an installable capability kind"
        );
    }

    #[test]
    fn execution_bindings_require_canonical_ascii_text() {
        let binding = InstallExecutionBinding::new("driver-a", &d('1'), &d('2'), &d('3')).unwrap();
        let text = binding.to_json_text();
        assert_eq!(
            InstallExecutionBinding::from_canonical_text(&text).unwrap(),
            binding
        );
        assert_eq!(
            binding.to_json().get_str("binding_digest"),
            Some(binding.binding_digest().as_str())
        );
        assert_eq!(
            InstallExecutionBinding::from_canonical_text(&format!(" {text}"))
                .unwrap_err()
                .message(),
            "install execution binding JSON must use canonical encoding"
        );
        assert_eq!(
            InstallExecutionBinding::from_canonical_text("[1]")
                .unwrap_err()
                .message(),
            "install execution binding JSON must encode an object"
        );
        assert_eq!(
            InstallExecutionBinding::from_canonical_text("{")
                .unwrap_err()
                .message(),
            "install execution binding must be valid JSON"
        );
        assert_eq!(
            InstallExecutionBinding::new("Driver", &d('1'), &d('2'), &d('3'))
                .unwrap_err()
                .message(),
            "driver_id must be a canonical token"
        );
        let doc = binding.to_json();
        assert_eq!(
            msg(validate_execution_binding(&with(
                &doc,
                "binding_digest",
                Json::str(d('f'))
            ))),
            "binding_digest does not match execution binding fields"
        );
        assert_eq!(
            msg(validate_execution_binding(&with(
                &doc,
                "schema",
                Json::str("x")
            ))),
            "install execution binding schema is unsupported"
        );
        assert_eq!(
            msg(validate_execution_binding(&without(&doc, "driver_id"))),
            "install execution binding is missing fields: driver_id"
        );
    }

    #[test]
    fn activation_authorization_digest_is_cja_of_the_five_fields() {
        let got = activation_authorization_digest(&d('1'), "{\"a\":\"é\"}", &d('2'), &d('3'));
        let expected = sha256_hex(&format!(
            "{{\"action_content_digest\":\"{}\",\"action_json\":\"{{\\\"a\\\":\\\"\\u00e9\\\"}}\",\"execution_binding_digest\":\"{}\",\"host_descriptor_digest\":\"{}\",\"schema\":\"ctx.activation-action-authorization-v1\"}}",
            d('1'),
            d('2'),
            d('3')
        ));
        assert_eq!(got, expected);
    }

    fn install_row() -> Json {
        let material = demo_material();
        let descriptor = demo_install_descriptor();
        Json::object([
            ("capability_id", Json::str("skill:demo")),
            ("kind", Json::str("skill")),
            ("actionability", Json::str("install")),
            ("catalog_identity", demo_catalog()),
            (
                "authority",
                Json::object([
                    ("type", Json::str("install")),
                    ("descriptor", descriptor),
                    ("result_material", material),
                ]),
            ),
        ])
    }

    fn load_row() -> Json {
        let catalog_digest = demo_catalog()
            .get_str("identity_digest")
            .unwrap()
            .to_owned();
        let material =
            authorized_material_from_catalog(&catalog_digest, &demo_descriptor_v2()).unwrap();
        Json::object([
            ("capability_id", Json::str("skill:demo")),
            ("kind", Json::str("skill")),
            ("actionability", Json::str("load")),
            ("catalog_identity", demo_catalog()),
            (
                "authority",
                Json::object([("type", Json::str("load")), ("material", material)]),
            ),
        ])
    }

    #[test]
    fn lineage_promotion_classifier() {
        let installed = authorized_material_from_lineage(&demo_lineage()).unwrap();
        assert_eq!(
            classify_lineage_promotion(&install_row(), &installed, &load_row(), false),
            Ok("install-to-load")
        );
        assert_eq!(
            classify_lineage_promotion(&install_row(), &installed, &load_row(), true),
            Err("pending-effect")
        );
        assert_eq!(
            classify_lineage_promotion(&install_row(), &Json::Null, &load_row(), false),
            Err("installed-lineage-missing")
        );
        assert_eq!(
            classify_lineage_promotion(&load_row(), &Json::Null, &load_row(), false),
            Ok("unchanged")
        );
        assert_eq!(
            classify_lineage_promotion(&load_row(), &Json::Null, &install_row(), false),
            Err("unsupported-lineage-transition")
        );
        let mut other = load_row();
        if let Json::Obj(m) = &mut other {
            m.insert("capability_id".into(), Json::str("skill:other"));
        }
        assert_eq!(
            classify_lineage_promotion(&install_row(), &installed, &other, false),
            Err("capability-identity-mismatch")
        );
        let wrong_lineage = build_installed_lineage(
            "skill:demo",
            "skill",
            demo_catalog().get_str("identity_digest").unwrap(),
            demo_material().get_str("identity_digest").unwrap(),
            &d('7'),
            &d('d'),
            &d('e'),
        );
        let wrong = authorized_material_from_lineage(&wrong_lineage).unwrap();
        assert_eq!(
            classify_lineage_promotion(&install_row(), &wrong, &load_row(), false),
            Err("lineage-install-descriptor-mismatch")
        );
    }
}
