"""AWS rules MiniStack's CloudFormation does not apply, applied here.

bulkrun's stack relies on them, so a deploy onto the emulator must meet
them as a deploy onto AWS does (localstack/README.md, "MiniStack:
differences from AWS that matter to bulkrun"):

- A REST API stage with execution logs (a MethodSettings LoggingLevel
  other than OFF) or access logs to CloudWatch Logs needs the account's
  API Gateway CloudWatch role: CloudFormation refuses the stage with
  "CloudWatch Logs role ARN must be set in account settings to enable
  logging" while the account has none (API Gateway developer guide, "Set
  up CloudWatch logging for REST APIs in API Gateway",
  https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-logging.html).
  MiniStack creates the stage whatever the account says.
- CloudFormation cannot delete a DynamoDB table whose deletion protection
  is on ("Resource cannot be deleted as it is currently protected against
  deletion"), not even in the rollback of the create that made it; the
  stack then ends ROLLBACK_FAILED or DELETE_FAILED. MiniStack's own
  DeleteTable refuses it, its CloudFormation deletes it anyway.

ministack.sh starts MiniStack through delivery.py, which imports this
module before MiniStack's main.
"""

from ministack.services import apigateway_v1
from ministack.services import dynamodb
from ministack.services.cloudformation import provisioners

NO_ROLE = ("CloudWatch Logs role ARN must be set in account settings to enable logging "
           "(Service: AmazonApiGateway; Status Code: 400; Error Code: BadRequestException)")
PROTECTED = ("Resource cannot be deleted as it is currently protected against deletion. "
             "Disable deletion protection first.")


def _logs(props):
    """Whether a stage's properties turn on CloudWatch logging."""
    access = props.get("AccessLogSetting") or {}
    if access.get("DestinationArn"):
        return True
    for m in props.get("MethodSettings") or []:
        if isinstance(m, dict) and str(m.get("LoggingLevel", "OFF")).upper() != "OFF":
            return True
    return False


def _require_role(props):
    settings = apigateway_v1._account_settings.get("settings") or {}
    if _logs(props) and not settings.get("cloudwatchRoleArn"):
        raise ValueError(NO_ROLE)


_stage = provisioners._RESOURCE_HANDLERS["AWS::ApiGateway::Stage"]
_stage_create, _stage_update = _stage["create"], _stage["update"]


def _checked_stage_create(logical_id, props, stack_name):
    _require_role(props)
    return _stage_create(logical_id, props, stack_name)


def _checked_stage_update(physical_id, old_props, new_props, stack_name):
    _require_role(new_props)
    return _stage_update(physical_id, old_props, new_props, stack_name)


_stage["create"], _stage["update"] = _checked_stage_create, _checked_stage_update

_table = provisioners._RESOURCE_HANDLERS["AWS::DynamoDB::Table"]
_table_delete = _table["delete"]


def _checked_table_delete(physical_id, props):
    if (dynamodb._tables.get(physical_id) or {}).get("DeletionProtectionEnabled"):
        raise ValueError(PROTECTED)
    return _table_delete(physical_id, props)


_table["delete"] = _checked_table_delete
