//! Data-plane role-based access: the data actions of Cosmos DB for NoSQL ("Configure
//! role-based access control with Microsoft Entra ID", learn.microsoft.com), which of them
//! each built-in role allows, and the 403s the service answers: an action the principal's
//! role does not allow (substatus 5301), or a management operation, which no token may do
//! through the data plane (substatus 5300).

use super::ACCOUNT;
use super::token::Principal;
use crate::entra::DataRole;
use crate::server::reply::Reply;
use cosmos_wire::batch::OperationType;
use http::Method;
use serde::Deserialize;

/// Substatus of a request a token may never make (a management operation).
const SUB_NOT_DATA_PLANE: u32 = 5300;
/// Substatus of a data action the principal's role does not allow.
const SUB_NO_RBAC_PERMISSION: u32 = 5301;

/// A data action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server) enum DataAction {
    /// Account, database and container metadata, and the partition key ranges.
    ReadMetadata,
    Create,
    Read,
    Replace,
    Upsert,
    Delete,
    ExecuteQuery,
    ReadChangeFeed,
}

impl DataAction {
    /// The action a document operation needs (a patch is a replace).
    pub(in crate::server) fn of(kind: OperationType) -> DataAction {
        match kind {
            OperationType::Create => DataAction::Create,
            OperationType::Upsert => DataAction::Upsert,
            OperationType::Read => DataAction::Read,
            OperationType::Delete => DataAction::Delete,
            OperationType::Replace | OperationType::Patch => DataAction::Replace,
        }
    }

    /// The action's name, as role definitions list it.
    fn name(self) -> &'static str {
        match self {
            DataAction::ReadMetadata => "Microsoft.DocumentDB/databaseAccounts/readMetadata",
            DataAction::Create => {
                "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/create"
            }
            DataAction::Read => {
                "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/read"
            }
            DataAction::Replace => {
                "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/replace"
            }
            DataAction::Upsert => {
                "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/upsert"
            }
            DataAction::Delete => {
                "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/delete"
            }
            DataAction::ExecuteQuery => {
                "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/executeQuery"
            }
            DataAction::ReadChangeFeed => {
                "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/readChangeFeed"
            }
        }
    }

    /// Whether `role` allows the action: the Contributor every one (`readMetadata`,
    /// `containers/*`, `containers/items/*`), the Reader `readMetadata`, `items/read`,
    /// `executeQuery` and `readChangeFeed`.
    fn allowed_to(self, role: DataRole) -> bool {
        match role {
            DataRole::Contributor => true,
            DataRole::Reader => matches!(
                self,
                DataAction::ReadMetadata
                    | DataAction::Read
                    | DataAction::ExecuteQuery
                    | DataAction::ReadChangeFeed
            ),
        }
    }
}

/// What a request needs of a token's principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server) enum Need {
    /// One data action.
    Data(DataAction),
    /// The actions of the batch's operations (in the body).
    Batch,
    /// A management operation: not for tokens.
    Management,
}

/// One operation of a batch body, as far as its action goes.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchOperation {
    operation_type: OperationType,
}

/// Whether `principal` may do what `need` asks on `path`.
pub(super) fn authorize(
    principal: &Principal,
    need: Need,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Result<(), Reply> {
    let actions = match need {
        Need::Management => {
            return Err(Reply::error(
                403,
                SUB_NOT_DATA_PLANE,
                format!(
                    "Request blocked by Auth {ACCOUNT} : The given request [{method} {path}] cannot be authorized by AAD token in data plane. Learn more: https://aka.ms/cosmos-native-rbac."
                ),
            ));
        }
        Need::Data(action) => vec![action],
        // A body that is not a batch gets the batch handler's 400.
        Need::Batch => serde_json::from_slice::<Vec<BatchOperation>>(body)
            .map(|ops| {
                ops.iter()
                    .map(|op| DataAction::of(op.operation_type))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let refused = actions
        .into_iter()
        .find(|action| !principal.role.is_some_and(|role| action.allowed_to(role)));
    match refused {
        None => Ok(()),
        Some(action) => Err(Reply::error(
            403,
            SUB_NO_RBAC_PERMISSION,
            format!(
                "Request blocked by Auth {ACCOUNT} : Request is blocked because principal [{}] does not have required RBAC permissions to perform action [{}] on resource [{}]. Learn more: https://aka.ms/cosmos-native-rbac.",
                principal.oid,
                action.name(),
                resource(path)
            ),
        )),
    }
}

/// The resource an action is on: the container's path for what is inside a container, else
/// the path (`/` for the account).
fn resource(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    format!("/{}", segments[..segments.len().min(4)].join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(role: Option<DataRole>) -> Principal {
        Principal {
            oid: "11111111-2222-3333-4444-555555555555".into(),
            role,
        }
    }

    fn status(role: Option<DataRole>, need: Need, body: &str) -> u16 {
        let path = "/dbs/db/colls/c/docs";
        match authorize(&principal(role), need, &Method::POST, path, body.as_bytes()) {
            Ok(()) => 200,
            Err(reply) => reply.status,
        }
    }

    #[test]
    fn a_reader_reads_and_queries_but_writes_nothing() {
        let reader = Some(DataRole::Reader);
        for action in [
            DataAction::ReadMetadata,
            DataAction::Read,
            DataAction::ExecuteQuery,
            DataAction::ReadChangeFeed,
        ] {
            assert_eq!(status(reader, Need::Data(action), ""), 200, "{action:?}");
        }
        for kind in [
            OperationType::Create,
            OperationType::Upsert,
            OperationType::Replace,
            OperationType::Patch,
            OperationType::Delete,
        ] {
            assert_eq!(
                status(reader, Need::Data(DataAction::of(kind)), ""),
                403,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_batch_needs_the_actions_of_its_operations() {
        let reads = r#"[{"operationType":"Read","id":"a"},{"operationType":"Read","id":"b"}]"#;
        let mixed =
            r#"[{"operationType":"Read","id":"a"},{"operationType":"Upsert","resourceBody":{}}]"#;
        assert_eq!(status(Some(DataRole::Reader), Need::Batch, reads), 200);
        assert_eq!(status(Some(DataRole::Reader), Need::Batch, mixed), 403);
        assert_eq!(status(Some(DataRole::Contributor), Need::Batch, mixed), 200);
    }

    #[test]
    fn no_role_and_management_are_refused_with_the_service_words() {
        let refused = authorize(
            &principal(None),
            Need::Data(DataAction::ReadMetadata),
            &Method::GET,
            "/",
            b"",
        )
        .err()
        .unwrap();
        assert_eq!((refused.status, refused.substatus), (403, 5301));
        let text = String::from_utf8(refused.body).unwrap();
        assert!(
            text.contains("principal [11111111-2222-3333-4444-555555555555] does not have required RBAC permissions to perform action [Microsoft.DocumentDB/databaseAccounts/readMetadata] on resource [/]"),
            "{text}"
        );
        let management = authorize(
            &principal(Some(DataRole::Contributor)),
            Need::Management,
            &Method::POST,
            "/dbs",
            b"",
        )
        .err()
        .unwrap();
        assert_eq!((management.status, management.substatus), (403, 5300));
        let text = String::from_utf8(management.body).unwrap();
        assert!(
            text.contains(
                "The given request [POST /dbs] cannot be authorized by AAD token in data plane"
            ),
            "{text}"
        );
    }
}
