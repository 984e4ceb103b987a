//! The artifact handle: a process-local, registry-local proof that an artifact was authenticated.
//!
//! A handle is neither `Clone` nor serializable and has no public constructor, so the only way to
//! hold one is to have had this process's registry instance authenticate the artifact. The
//! service checks a handle with [`super::ArtifactRegistry::verify_handle`] before it persists
//! anything bound to it.

use std::sync::Arc;

use ctx_model::{ARTIFACT_OBSERVATION_PROVIDER, ObservationRef, Surrogate};
use ctx_projections::engine::{ObservationNormalizer, SeamError};

use crate::catalog::Catalog;

use super::error::RegistryError;
use super::manifest::Manifest;

/// Prefix of the `opaque_id` of an artifact observation reference; the manifest digest follows.
pub const ARTIFACT_OBSERVATION_OPAQUE_PREFIX: &str = "manifest-";

/// An authenticated artifact, issued by one [`super::ArtifactRegistry`] instance in one process.
#[derive(Debug)]
pub struct ArtifactHandle {
    manifest_digest: String,
    manifest: Manifest,
    observation_reference: ObservationRef,
    catalog: Arc<Catalog>,
    /// The issuing registry instance's private token.
    pub(super) registry_token: u64,
    /// The issuing process.
    pub(super) issuing_pid: u32,
}

impl ArtifactHandle {
    pub(super) fn new(
        manifest_digest: String,
        manifest: Manifest,
        catalog: Arc<Catalog>,
        registry_token: u64,
    ) -> ArtifactHandle {
        let observation_reference = ObservationRef {
            provider_id: ARTIFACT_OBSERVATION_PROVIDER.to_owned(),
            opaque_id: format!("{ARTIFACT_OBSERVATION_OPAQUE_PREFIX}{manifest_digest}"),
            content_digest: manifest.observation_surrogate.value_digest.clone(),
        };
        ArtifactHandle {
            manifest_digest,
            manifest,
            observation_reference,
            catalog,
            registry_token,
            issuing_pid: std::process::id(),
        }
    }

    /// SHA-256 of the manifest's canonical bytes; the artifact's identity.
    pub fn manifest_digest(&self) -> &str {
        &self.manifest_digest
    }

    /// SHA-256 of the artifact's canonical `catalog.json` (equal to the catalog content digest).
    pub fn graph_artifact_digest(&self) -> &str {
        &self.manifest.graph_artifact_digest
    }

    pub fn planning_environment_digest(&self) -> &str {
        &self.manifest.planning_environment_digest
    }

    pub fn catalog_namespace_digest(&self) -> &str {
        &self.manifest.catalog_namespace_digest
    }

    pub fn catalog_retrieval_digest(&self) -> &str {
        &self.manifest.catalog_retrieval_digest
    }

    pub fn benefit_facts_snapshot_digest(&self) -> &str {
        &self.manifest.benefit_facts_snapshot_digest
    }

    pub fn benefit_policy_snapshot_digest(&self) -> &str {
        &self.manifest.benefit_policy_snapshot_digest
    }

    pub fn material_snapshot_digest(&self) -> &str {
        &self.manifest.material_snapshot_digest
    }

    pub fn installation_snapshot_digest(&self) -> &str {
        &self.manifest.installation_snapshot_digest
    }

    /// The observation surrogate's value digest (`H(CJ(value))`).
    pub fn observation_surrogate_digest(&self) -> &str {
        &self.manifest.observation_surrogate.value_digest
    }

    pub fn planning_schema_version(&self) -> &str {
        &self.manifest.planning_schema_version
    }

    pub fn observation_surrogate(&self) -> &Surrogate {
        &self.manifest.observation_surrogate
    }

    /// `{provider_id: ARTIFACT_OBSERVATION_PROVIDER, opaque_id: "manifest-" + manifest
    /// digest, content_digest: surrogate value digest}`: the reference a decision event carries.
    pub fn observation_reference(&self) -> &ObservationRef {
        &self.observation_reference
    }

    /// The catalog the artifact holds (its bodies were verified when the artifact was
    /// published; spec/registry.md).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Checks the snapshots the planning authorities report now against the ones the artifact
    /// binds (spec/service.md §3; spec/registry.md §6): planning over drifted facts, policy,
    /// materials or install bundles would not replay to the plan the artifact promises.
    pub fn check_captured_authority(
        &self,
        captured: &CapturedAuthority<'_>,
    ) -> Result<(), RegistryError> {
        for (field, now, bound) in [
            (
                "benefit_facts_snapshot_digest",
                captured.benefit_facts_snapshot_digest,
                self.benefit_facts_snapshot_digest(),
            ),
            (
                "benefit_policy_snapshot_digest",
                captured.benefit_policy_snapshot_digest,
                self.benefit_policy_snapshot_digest(),
            ),
            (
                "material_snapshot_digest",
                captured.material_snapshot_digest,
                self.material_snapshot_digest(),
            ),
            (
                "installation_snapshot_digest",
                captured.installation_snapshot_digest,
                self.installation_snapshot_digest(),
            ),
        ] {
            if now != bound {
                return Err(RegistryError::AuthorityDrift {
                    field,
                    captured: now.to_owned(),
                    bound: bound.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The observation normalizer of this artifact, for [`ctx_projections::engine::Engine`].
    pub fn observation_normalizer(&self) -> ArtifactObservationNormalizer {
        ArtifactObservationNormalizer {
            reference: self.observation_reference.clone(),
            surrogate: self.manifest.observation_surrogate.clone(),
            issuing_pid: self.issuing_pid,
        }
    }
}

/// The snapshot digests the planning authorities report at the time of a call.
#[derive(Debug, Clone, Copy)]
pub struct CapturedAuthority<'a> {
    pub benefit_facts_snapshot_digest: &'a str,
    pub benefit_policy_snapshot_digest: &'a str,
    pub material_snapshot_digest: &'a str,
    pub installation_snapshot_digest: &'a str,
}

/// Resolves exactly one reference — its artifact's — into the artifact's observation surrogate,
/// and only in the process that authenticated the artifact.
///
/// It is a separate value rather than the handle itself because the engine keeps its normalizer
/// as a shared `'static` object, while the handle must stay unique and uncopyable.
#[derive(Debug)]
pub struct ArtifactObservationNormalizer {
    reference: ObservationRef,
    surrogate: Surrogate,
    issuing_pid: u32,
}

impl ObservationNormalizer for ArtifactObservationNormalizer {
    fn normalize(&self, reference: &ObservationRef) -> Result<Surrogate, SeamError> {
        if std::process::id() != self.issuing_pid {
            return Err(SeamError(
                "managed artifact handle is unavailable outside its issuing process".to_owned(),
            ));
        }
        if *reference != self.reference {
            return Err(SeamError(
                "managed artifact observation reference is unavailable".to_owned(),
            ));
        }
        Ok(self.surrogate.clone())
    }
}
