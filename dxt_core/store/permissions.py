"""The IAM permissions an S3 archive needs, and the one each S3 operation it makes needs:
named in the error of a refused operation (AccessDenied) and in docs/deploy.md."""

from __future__ import annotations

#: The IAM permissions the archive needs on its bucket (docs/deploy.md lists the same).
PERMISSIONS = (
    "s3:ListBucket",
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:ListBucketMultipartUploads",
    "s3:AbortMultipartUpload",
)
#: The permission each S3 operation the archive makes needs (AWS's "Actions, resources and
#: condition keys for Amazon S3"): named in the error of a refused one (AccessDenied).
OPERATION_PERMISSION = {
    "ListObjectsV2": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "CopyObject": "s3:GetObject (on the source) and s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
}


def access_hint(operation: str | None) -> str:
    """What to give the credentials when S3 refused ``operation`` (AccessDenied)."""
    every = ", ".join(PERMISSIONS)
    needed = OPERATION_PERMISSION.get(operation or "")
    if needed is None:
        return f"give these credentials {every} on the bucket"
    return f"{operation} needs {needed}: give it to these credentials (dxt needs {every})"


__all__ = ["OPERATION_PERMISSION", "PERMISSIONS", "access_hint"]
