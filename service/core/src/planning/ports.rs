//! The host-implemented ports of the runtime replay adapter (spec/planner.md §10): where retrieval
//! presentations, authenticated benefit facts, catalog load bundles and install bundles come from,
//! and the default implementations over one [`Catalog`].
//!
//! Every port pins a snapshot digest. The adapter re-reads those digests around every port call
//! and remembers every output, so a port may be backed by anything (a file, a database, a
//! service) as long as equal digests mean equal answers.

use ctx_model::CapabilityKind;
use std::sync::Arc;

use ctx_model::{
    INSTALL_DESCRIPTOR_SCHEMA_V2, Json, MATERIAL_DESCRIPTOR_SCHEMA_V2, cj_digest,
    descriptor_matches_result_material, is_sha, validate_catalog_identity,
    validate_install_plan_descriptor, validate_material_descriptor, validate_material_identity,
};

use super::benefit::{Availability, BenefitCandidate, EvidenceSummary, ResourceCosts};
use crate::catalog::{Actionability, CapabilityCandidate, Catalog, WorkObservation, retrieve};

/// Why a port did not answer. Only [`PortError::CandidateAuthorityUnavailable`] and
/// [`PortError::SourceUnavailable`] are soft; anything else fails the whole decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PortError {
    /// This one candidate cannot be authenticated now; the adapter skips it.
    #[error("{0}")]
    CandidateAuthorityUnavailable(String),
    /// The candidate source cannot be read now; the adapter plans `degraded / catalog-unavailable`.
    #[error("{0}")]
    SourceUnavailable(String),
    /// The port answered with something invalid, or failed: the decision fails.
    #[error("{0}")]
    Invalid(String),
}

fn port_invalid<T>(message: impl Into<String>) -> Result<T, PortError> {
    Err(PortError::Invalid(message.into()))
}

/// Retrieval presentations for an observation (the reference's candidate source).
pub trait CandidateSourcePort: Send + Sync {
    /// The raw retrieval snapshot digest (`catalog_retrieval_snapshot_digest`).
    fn catalog_snapshot_digest(&self) -> &str;
    fn retrieve(
        &self,
        observation: &WorkObservation,
    ) -> Result<Vec<CapabilityCandidate>, PortError>;
}

/// Authenticated benefit facts for one presentation.
pub trait BenefitFactsPort: Send + Sync {
    fn benefit_facts_snapshot_digest(&self) -> &str;
    fn benefit_candidate(
        &self,
        presentation: &CapabilityCandidate,
        observation: &WorkObservation,
    ) -> Result<BenefitCandidate, PortError>;
}

/// Typed load bundles for `load` presentations.
pub trait MaterialPort: Send + Sync {
    fn material_snapshot_digest(&self) -> &str;
    fn load_bundle(
        &self,
        presentation: &CapabilityCandidate,
    ) -> Result<CatalogLoadPlanningBundle, PortError>;
}

/// Install bundles for `install` presentations.
pub trait InstallBundlePort: Send + Sync {
    fn installation_snapshot_digest(&self) -> &str;
    /// `Ok(None)` when the port knows no bundle for the capability.
    fn describe_bundle(
        &self,
        capability_id: &str,
        kind: CapabilityKind,
    ) -> Result<Option<InstallPlanningBundle>, PortError>;
}

// ---------------------------------------------------------------------------------------------
// Bundles

/// `CatalogLoadPlanningBundle`: the exact presentation, its catalog identity, the v2 `load`
/// material descriptor and the snapshots it was read under. Only constructible through
/// [`CatalogLoadPlanningBundle::new`], which checks the reference's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogLoadPlanningBundle {
    presentation: CapabilityCandidate,
    catalog_identity: Json,
    descriptor: Json,
    catalog_snapshot_digest: String,
    material_snapshot_digest: String,
    authority_material_snapshot_digest: String,
}

impl CatalogLoadPlanningBundle {
    /// `authority_material_snapshot_digest` defaults to `material_snapshot_digest`.
    pub fn new(
        presentation: CapabilityCandidate,
        catalog_identity: Json,
        descriptor: Json,
        catalog_snapshot_digest: &str,
        material_snapshot_digest: &str,
        authority_material_snapshot_digest: Option<&str>,
    ) -> Result<CatalogLoadPlanningBundle, PortError> {
        if presentation.actionability != Actionability::Load {
            return port_invalid("load bundle requires a load presentation");
        }
        let authority = authority_material_snapshot_digest.unwrap_or(material_snapshot_digest);
        for (field, value) in [
            ("catalog_snapshot_digest", catalog_snapshot_digest),
            ("material_snapshot_digest", material_snapshot_digest),
            ("authority_material_snapshot_digest", authority),
        ] {
            if !is_sha(value) {
                return port_invalid(format!(
                    "load bundle {field} must be a lowercase SHA-256 digest"
                ));
            }
        }
        if validate_catalog_identity(&catalog_identity).is_err()
            || catalog_identity.get_str("capability_id") != Some(&presentation.capability_id)
            || catalog_identity.get_str("kind") != Some(presentation.kind.as_str())
        {
            return port_invalid(
                "load bundle catalog identity does not match its exact presentation",
            );
        }
        if validate_material_descriptor(&descriptor).is_err()
            || descriptor.get_str("schema") != Some(MATERIAL_DESCRIPTOR_SCHEMA_V2)
            || descriptor.get_str("capability_id") != Some(&presentation.capability_id)
            || descriptor.get_str("kind") != Some(presentation.kind.as_str())
            || descriptor.get_str("actionability") != Some("load")
            || descriptor.get_str("material_snapshot_digest") != Some(authority)
        {
            return port_invalid(
                "load bundle descriptor does not match its presentation or material snapshot",
            );
        }
        Ok(CatalogLoadPlanningBundle {
            presentation,
            catalog_identity,
            descriptor,
            catalog_snapshot_digest: catalog_snapshot_digest.to_owned(),
            material_snapshot_digest: material_snapshot_digest.to_owned(),
            authority_material_snapshot_digest: authority.to_owned(),
        })
    }

    pub fn presentation(&self) -> &CapabilityCandidate {
        &self.presentation
    }

    pub fn catalog_identity(&self) -> &Json {
        &self.catalog_identity
    }

    pub fn descriptor(&self) -> &Json {
        &self.descriptor
    }

    pub fn catalog_snapshot_digest(&self) -> &str {
        &self.catalog_snapshot_digest
    }

    pub fn material_snapshot_digest(&self) -> &str {
        &self.material_snapshot_digest
    }

    pub fn authority_material_snapshot_digest(&self) -> &str {
        &self.authority_material_snapshot_digest
    }

    /// Everything the bundle says, for the adapter's snapshot-read memo.
    pub fn to_json(&self) -> Json {
        Json::object([
            (
                "authority_material_snapshot_digest",
                Json::str(self.authority_material_snapshot_digest.as_str()),
            ),
            ("catalog_identity", self.catalog_identity.clone()),
            (
                "catalog_snapshot_digest",
                Json::str(self.catalog_snapshot_digest.as_str()),
            ),
            ("descriptor", self.descriptor.clone()),
            (
                "material_snapshot_digest",
                Json::str(self.material_snapshot_digest.as_str()),
            ),
            ("presentation", self.presentation.to_json()),
        ])
    }
}

/// Binds an install bundle to the authority layer that issued it inside an aggregate
/// installation snapshot (`AuthorityBoundInstallPlanningBundle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallAuthorityBinding {
    pub authority_installation_snapshot_digest: String,
    pub installation_snapshot_digest: String,
}

/// `InstallPlanningBundle {descriptor, result_material}` (spec/planner.md §10), optionally
/// authority-bound.
#[derive(Debug, Clone, PartialEq)]
pub struct InstallPlanningBundle {
    descriptor: Json,
    result_material: Json,
    authority: Option<InstallAuthorityBinding>,
}

impl InstallPlanningBundle {
    /// A v2 descriptor naming exactly `result_material`.
    pub fn new(descriptor: Json, result_material: Json) -> Result<Self, PortError> {
        if validate_install_plan_descriptor(&descriptor).is_err() {
            return port_invalid("descriptor must be an InstallPlanDescriptor");
        }
        if validate_material_identity(&result_material).is_err() {
            return port_invalid("result_material must be a MaterialIdentity");
        }
        if descriptor.get_str("schema") != Some(INSTALL_DESCRIPTOR_SCHEMA_V2) {
            return port_invalid("install planning bundle requires descriptor schema v2");
        }
        if !descriptor_matches_result_material(&descriptor, &result_material) {
            return port_invalid("install descriptor does not match the full result material");
        }
        Ok(InstallPlanningBundle {
            descriptor,
            result_material,
            authority: None,
        })
    }

    /// An authority-bound bundle: the descriptor's provenance must be the authority layer's
    /// installation digest.
    pub fn authority_bound(
        descriptor: Json,
        result_material: Json,
        binding: InstallAuthorityBinding,
    ) -> Result<Self, PortError> {
        for value in [
            &binding.authority_installation_snapshot_digest,
            &binding.installation_snapshot_digest,
        ] {
            if !is_sha(value) {
                return port_invalid(
                    "installation snapshot digest must be a lowercase SHA-256 digest",
                );
            }
        }
        let mut bundle = InstallPlanningBundle::new(descriptor, result_material)?;
        if bundle.descriptor.get_str("provenance_digest")
            != Some(binding.authority_installation_snapshot_digest.as_str())
        {
            return port_invalid(
                "install descriptor does not match its authority installation snapshot",
            );
        }
        bundle.authority = Some(binding);
        Ok(bundle)
    }

    pub fn descriptor(&self) -> &Json {
        &self.descriptor
    }

    pub fn result_material(&self) -> &Json {
        &self.result_material
    }

    pub fn authority(&self) -> Option<&InstallAuthorityBinding> {
        self.authority.as_ref()
    }

    /// Everything the bundle says, for the adapter's snapshot-read memo.
    pub fn to_json(&self) -> Json {
        let binding = self.authority.as_ref().map_or(Json::Null, |b| {
            Json::object([
                (
                    "authority_installation_snapshot_digest",
                    Json::str(b.authority_installation_snapshot_digest.as_str()),
                ),
                (
                    "installation_snapshot_digest",
                    Json::str(b.installation_snapshot_digest.as_str()),
                ),
            ])
        });
        Json::object([
            ("authority", binding),
            ("descriptor", self.descriptor.clone()),
            ("result_material", self.result_material.clone()),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// Default implementations over one catalog

/// Schema of the default facts snapshot document.
pub const CATALOG_FACTS_SCHEMA: &str = "ctx.catalog-benefit-facts-v1";
/// Schema of the default resource profile document.
pub const CATALOG_RESOURCE_PROFILE_SCHEMA: &str = "ctx.catalog-resource-profile-v1";
/// Schema of the default (empty) evidence window document.
pub const CATALOG_EVIDENCE_WINDOW_SCHEMA: &str = "ctx.catalog-evidence-window-v1";
/// Expected task benefit the catalog metadata claims for every capability, in ppm. The catalog
/// carries no outcome data, so every capability gets the same prior; retrieval relevance is what
/// tells them apart.
pub const CATALOG_EXPECTED_BENEFIT_PPM: i64 = 800_000;
/// Trust of a catalog capability, in ppm: the loader verified every body against its digest.
pub const CATALOG_TRUST_PPM: i64 = 1_000_000;
/// The record maximum relevance of a catalog capability, in ppm (the catalog format has no
/// per-record cap, so relevance is the presentation score).
pub const CATALOG_MAXIMUM_RELEVANCE_PPM: i64 = 1_000_000;

/// The catalog as a candidate source: [`retrieve`] under its retrieval snapshot digest.
#[derive(Debug, Clone)]
pub struct CatalogCandidateSource {
    catalog: Arc<Catalog>,
}

impl CatalogCandidateSource {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        CatalogCandidateSource { catalog }
    }
}

impl CandidateSourcePort for CatalogCandidateSource {
    fn catalog_snapshot_digest(&self) -> &str {
        self.catalog.retrieval_snapshot_digest()
    }

    fn retrieve(
        &self,
        observation: &WorkObservation,
    ) -> Result<Vec<CapabilityCandidate>, PortError> {
        Ok(retrieve(&self.catalog, observation))
    }
}

/// Benefit facts from catalog metadata (spec/planner.md §10): availability `advisory` for manual
/// presentations and `executable` otherwise; relevance = min(record maximum, presentation score);
/// fixed expected benefit ([`CATALOG_EXPECTED_BENEFIT_PPM`]), trust ([`CATALOG_TRUST_PPM`]), zero
/// costs (the catalog measures none) and an empty evidence window.
#[derive(Debug, Clone)]
pub struct CatalogBenefitFacts {
    catalog: Arc<Catalog>,
    snapshot_digest: String,
}

impl CatalogBenefitFacts {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        // The facts are a pure function of the catalog content and the constants above, so
        // the snapshot digest is a digest of exactly those.
        let snapshot_digest = cj_digest(&Json::object([
            (
                "catalog_retrieval_snapshot_digest",
                Json::str(catalog.retrieval_snapshot_digest()),
            ),
            (
                "expected_task_benefit_ppm",
                Json::Int(CATALOG_EXPECTED_BENEFIT_PPM),
            ),
            (
                "maximum_relevance_ppm",
                Json::Int(CATALOG_MAXIMUM_RELEVANCE_PPM),
            ),
            ("schema", Json::str(CATALOG_FACTS_SCHEMA)),
            ("trust_ppm", Json::Int(CATALOG_TRUST_PPM)),
        ]));
        CatalogBenefitFacts {
            catalog,
            snapshot_digest,
        }
    }
}

impl BenefitFactsPort for CatalogBenefitFacts {
    fn benefit_facts_snapshot_digest(&self) -> &str {
        &self.snapshot_digest
    }

    fn benefit_candidate(
        &self,
        presentation: &CapabilityCandidate,
        observation: &WorkObservation,
    ) -> Result<BenefitCandidate, PortError> {
        if self.catalog.entry(&presentation.capability_id).is_none() {
            return port_invalid("benefit facts port does not know the presented capability");
        }
        // Facts exist only for a presentation the observation could have produced
        // (spec/planner.md §10).
        let work = observation.work_tokens();
        if observation
            .rejected_capability_ids()
            .contains(&presentation.capability_id)
            || !presentation
                .matching_signals
                .iter()
                .all(|s| work.binary_search(s).is_ok())
        {
            return Err(PortError::CandidateAuthorityUnavailable(
                "benefit facts are unavailable for this presentation".into(),
            ));
        }
        let id = presentation.capability_id.as_str();
        let costs = ResourceCosts::default();
        let resource_profile_digest = cj_digest(&Json::object([
            ("capability_id", Json::str(id)),
            ("costs", costs.to_json()),
            ("schema", Json::str(CATALOG_RESOURCE_PROFILE_SCHEMA)),
        ]));
        let window = cj_digest(&Json::object([
            (
                "benefit_facts_snapshot_digest",
                Json::str(&self.snapshot_digest),
            ),
            ("capability_id", Json::str(id)),
            ("schema", Json::str(CATALOG_EVIDENCE_WINDOW_SCHEMA)),
        ]));
        Ok(BenefitCandidate {
            capability_id: id.to_owned(),
            source_digest: presentation.source_digest.clone(),
            resource_profile_digest,
            availability: if presentation.actionability == Actionability::Manual {
                Availability::Advisory
            } else {
                Availability::Executable
            },
            expected_task_benefit_ppm: CATALOG_EXPECTED_BENEFIT_PPM,
            relevance_ppm: CATALOG_MAXIMUM_RELEVANCE_PPM
                .min(i64::from(presentation.normalized_score_ppm)),
            trust_ppm: CATALOG_TRUST_PPM,
            costs: Some(costs),
            evidence: EvidenceSummary::empty(id, &presentation.source_digest, &window),
            source_trusted: true,
            security_approved: true,
            permissions_allowed: true,
            credentials_available: true,
            coverage_keys: Vec::new(),
            equivalence_key: None,
            complements: Vec::new(),
            conflicts: Vec::new(),
        })
    }
}

/// Load bundles from the catalog's v2 material descriptors.
#[derive(Debug, Clone)]
pub struct CatalogMaterialPort {
    catalog: Arc<Catalog>,
}

impl CatalogMaterialPort {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        CatalogMaterialPort { catalog }
    }
}

impl MaterialPort for CatalogMaterialPort {
    fn material_snapshot_digest(&self) -> &str {
        self.catalog.material_snapshot_digest()
    }

    fn load_bundle(
        &self,
        presentation: &CapabilityCandidate,
    ) -> Result<CatalogLoadPlanningBundle, PortError> {
        let id = presentation.capability_id.as_str();
        let (Some(descriptor), Some(identity)) = (
            self.catalog.material_descriptor(id),
            self.catalog.catalog_identity(id),
        ) else {
            return Err(PortError::CandidateAuthorityUnavailable(
                "load candidate is missing an exact typed load bundle".into(),
            ));
        };
        CatalogLoadPlanningBundle::new(
            presentation.clone(),
            identity,
            descriptor.clone(),
            self.catalog.retrieval_snapshot_digest(),
            self.catalog.material_snapshot_digest(),
            None,
        )
    }
}

/// Install bundles from the catalog's v2 install descriptors and result material identities.
#[derive(Debug, Clone)]
pub struct CatalogInstallPort {
    catalog: Arc<Catalog>,
}

impl CatalogInstallPort {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        CatalogInstallPort { catalog }
    }
}

impl InstallBundlePort for CatalogInstallPort {
    fn installation_snapshot_digest(&self) -> &str {
        self.catalog.installation_snapshot_digest()
    }

    fn describe_bundle(
        &self,
        capability_id: &str,
        kind: CapabilityKind,
    ) -> Result<Option<InstallPlanningBundle>, PortError> {
        match self.catalog.entry(capability_id) {
            Some(entry) if entry.kind == kind && entry.install.is_some() => {}
            _ => return Ok(None),
        }
        let (Some(descriptor), Some(material)) = (
            self.catalog.install_descriptor(capability_id),
            self.catalog.material_identity(capability_id),
        ) else {
            return Ok(None);
        };
        InstallPlanningBundle::new(descriptor.clone(), material).map(Some)
    }
}
